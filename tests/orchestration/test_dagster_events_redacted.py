"""What a failing batch leaves in Dagster carries no credential (issue 28 item 7): the run's tags,
every event of the run (the step failure with its cause chain, the failed batch_errors check, the
halt observation, logs), the sensor's skip reason while halted. A real (ephemeral) Dagster
instance; the batch fails in a user function whose error message holds a URL with a password and
a token, as a client library's error may."""
from __future__ import annotations

import os

import dagster as dg
import pyarrow as pa
from dagster._serdes import serialize_value  # the stored form of the events (test only)
from orch_testutil import write_files

import increments as inc
from orchestration import build_definitions

SECRETS = ("hunter2", "tok-5ecret")
URL = "https://svc:hunter2@api.example.com/v1/lookup?token=tok-5ecret&page=2"
S3 = "s3://AKIA:hunter2@bucket/t"        # (named, not written, where raised: a stack shows the source line)


def _query(root: str):
    def fail(batch: pa.RecordBatch) -> pa.RecordBatch:
        raise ConnectionError(f"lookup failed: POST {URL} returned 503")

    def leaky():
        frame = inc.read_stream.files(os.path.join(root, "landing", "leaky"), format="json", schema="id BIGINT, name STRING")
        return (frame.map_in_arrow(fail, "id BIGINT, name STRING").write_stream.format("parquet")
                .checkpoint_location(os.path.join(root, "chk", "leaky")).query_name("leaky")
                .trigger(processing_time="1 minute"))
    return leaky


def _clean(text: str, what: str) -> None:
    for s in SECRETS:
        assert s not in text, f"{what} holds {s!r}: {text[:2000]}"


def test_a_failed_batch_leaves_no_credential_in_dagster(tmp_path):
    root = str(tmp_path)
    write_files(root, "leaky", 1)
    defs = build_definitions([(_query(root), {"path": os.path.join(root, "lake"), "max_retries": 1,
                                              "retry_delay_s": 0.05, "sensor_status": "stopped"})], asset_root=root)
    with dg.DagsterInstance.ephemeral() as inst:
        res = defs.get_job_def("leaky_batch").execute_in_process(instance=inst, raise_on_error=False)
        assert not res.success
        run = inst.get_run_by_id(res.run_id)
        assert run.tags["increments/outcome"] == "failed" and "api.example.com" in run.tags["increments/error"]
        _clean(repr(dict(run.tags)), "the run's tags")
        events = inst.all_logs(res.run_id)
        failure = [e for e in events if e.dagster_event and e.dagster_event.event_type_value == "STEP_FAILURE"]
        assert failure and "api.example.com" in serialize_value(failure[-1])      # the error is there, redacted
        for e in events:
            _clean(serialize_value(e), f"event {e.dagster_event.event_type_value if e.dagster_event else e.message!r}")
        sensor = defs.get_sensor_def("leaky_trigger")
        skip = sensor.evaluate_tick(dg.build_sensor_context(instance=inst)).skip_message
        assert "HALTED" in skip and "api.example.com" in skip
        _clean(skip, "the sensor's skip reason")


def test_the_other_ops_fail_redacted_too():
    """The compact, migrate, purge and drain-start ops wear ops.redacted_errors: an error raised in
    them (with a cause chain) reaches Dagster's stored step failure redacted, class names kept."""
    from orchestration.ops import redacted_errors

    @dg.op
    @redacted_errors
    def maintenance_op(context):
        try:
            raise OSError(f"GET {URL} failed")
        except OSError as e:
            raise RuntimeError(f"vacuum of {S3} failed: {e}") from e

    @dg.job
    def maint():
        maintenance_op()

    with dg.DagsterInstance.ephemeral() as inst:
        res = maint.execute_in_process(instance=inst, raise_on_error=False)
        assert not res.success
        events = [serialize_value(e) for e in inst.all_logs(res.run_id)]
        failure = next(e for e in events if "STEP_FAILURE" in e)
        assert "RuntimeError" in failure and "OSError" in failure and "s3://AKIA:***@bucket/t" in failure
        for e in events:
            _clean(e, "an event of the maintenance run")

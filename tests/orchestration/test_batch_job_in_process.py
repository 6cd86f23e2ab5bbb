"""The batch job in process (an ephemeral Dagster instance, no daemon): a bad input file fails the
batch after its backed-off retries and halts the query (error with file and line on the run, the
sink's batch_errors check and the sensor's skip reason); a launch after the fix resumes it. Asset
keys shared across queries; check metadata without -1 placeholders."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import dagster as dg

from orch_testutil import ROWS_PER_FILE, write_files

import increments as inc
from orchestration import build_definitions
from orchestration.sensors import halt_state

SPEC = SimpleNamespace(key="halting", name="halting")     # what halt_state reads of a query's spec


def _files_query(root: str, name: str, fmt: str = "parquet", source: str = "landing"):
    def factory():
        frame = inc.read_stream.files(os.path.join(root, source), format="json", schema="id BIGINT, name STRING",
                                      max_files_per_trigger=1)
        return (frame.write_stream.format(fmt).output_mode("append")
                .checkpoint_location(os.path.join(root, "chk", name)).query_name(name)
                .trigger(processing_time="1 minute"))
    factory.__name__ = name
    return factory


def _bad_file(root: str, name: str = "part-0001.json") -> str:
    path = os.path.join(root, "landing", name)
    with open(path, "w") as f:
        f.write(json.dumps({"id": 1, "name": "ok"}) + "\n" + '{"id": 2, "name: broken}\n')
    return path


def test_bad_file_halts_then_one_launch_resumes(tmp_path):
    root = str(tmp_path)
    write_files(root, "", 1)                      # landing/part-0000.json
    bad = _bad_file(root)
    q = _files_query(root, "halting")
    defs = build_definitions([(q, {"path": os.path.join(root, "lake"), "max_retries": 2, "retry_delay_s": 0.05,
                                   "sensor_status": "stopped"})], asset_root=root)
    job = defs.get_job_def("halting_batch")
    inst = dg.DagsterInstance.ephemeral()
    assert inst.get_run_by_id(job.execute_in_process(instance=inst).run_id).tags["increments/outcome"] == "committed"
    failed = job.execute_in_process(instance=inst, raise_on_error=False)
    assert not failed.success
    run = inst.get_run_by_id(failed.run_id)
    assert run.tags["increments/outcome"] == "failed" and run.tags["increments/batch_id"] == "1"
    assert f"file {bad}, line 2" in run.tags["increments/error"], run.tags["increments/error"]
    retries = [e for e in inst.all_logs(failed.run_id) if e.dagster_event and
               e.dagster_event.event_type_value == "STEP_UP_FOR_RETRY"]
    assert len(retries) == 2                       # max_retries, in the run (backed off), not as new runs
    sink = dg.AssetKey(["files", "lake"])
    check = inst.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(sink, "batch_errors")])[dg.AssetCheckKey(sink, "batch_errors")]
    ev = check.event.dagster_event.event_specific_data
    assert ev.passed is False and ev.metadata["file"].value == bad and ev.metadata["line"].value == "2"   # text: not plotted
    spec_halt = halt_state(inst, SPEC)
    assert spec_halt and spec_halt["batch_id"] == "1" and f"{bad}, line 2" in spec_halt["error"]
    # the fix, then one launch: the batch is redone and committed; the halt is over
    with open(bad, "w") as f:
        f.write(json.dumps({"id": 2, "name": "fixed"}) + "\n")
    again = inst.get_run_by_id(job.execute_in_process(instance=inst).run_id)
    assert (again.tags["increments/outcome"], again.tags["increments/batch_id"]) == ("committed", "1")
    assert halt_state(inst, SPEC) is None
    ids = sorted(inc.read.parquet_sink(os.path.join(root, "lake")).column("id").to_pylist())
    assert ids == sorted(list(range(ROWS_PER_FILE)) + [2])


def test_queries_share_source_assets_and_chain(tmp_path):
    root = str(tmp_path)

    def kafka_query(name: str, out: str):
        def factory():
            frame = inc.read_stream.kafka("127.0.0.1:1", topic="clicks")
            return (frame.write_stream.format("delta").checkpoint_location(os.path.join(root, "chk", name))
                    .query_name(name).trigger(processing_time="1 minute"))
        factory.__name__ = name
        return factory, {"path": os.path.join(root, out)}

    def silver():
        frame = inc.read_stream.delta(os.path.join(root, "bronze"))
        return (frame.write_stream.format("delta").checkpoint_location(os.path.join(root, "chk", "silver"))
                .query_name("silver").trigger(processing_time="1 minute"))

    defs = build_definitions([kafka_query("a", "bronze"), kafka_query("b", "other"),
                              (silver, {"path": os.path.join(root, "silver")})], asset_root=root)
    g = defs.resolve_asset_graph()
    topic = dg.AssetKey(["kafka", "clicks"])
    assert g.get(dg.AssetKey(["delta", "bronze"])).parent_keys == {topic}
    assert g.get(dg.AssetKey(["delta", "other"])).parent_keys == {topic}
    assert g.get(dg.AssetKey(["delta", "silver"])).parent_keys == {dg.AssetKey(["delta", "bronze"])}


def test_check_metadata_has_no_placeholders(tmp_path):
    root = str(tmp_path)
    write_files(root, "", 1)
    defs = build_definitions([(_files_query(root, "plain"), {"path": os.path.join(root, "lake"),
                                                             "sensor_status": "stopped"})], asset_root=root)
    inst = dg.DagsterInstance.ephemeral()
    defs.get_job_def("plain_batch").execute_in_process(instance=inst)
    sink = dg.AssetKey(["files", "lake"])
    checks = {k.name for c in defs.asset_checks for k in c.check_keys}
    assert "kafka_lag" not in checks and "watermark_lag" not in checks      # a files query without a watermark
    for rule in ("state_rows", "batch_duration"):
        key = dg.AssetCheckKey(sink, rule)
        ev = inst.event_log_storage.get_latest_asset_check_execution_by_key([key])[key].event
        md = ev.dagster_event.event_specific_data.metadata
        assert all(getattr(v, "value", v) != -1 for v in md.values()), (rule, md)
    mat = inst.get_latest_materialization_event(sink).asset_materialization
    assert mat.metadata["sink_version"].value == 0          # the parquet sink's version is the batch id
    from orchestration.ops import lineage_metadata
    rec = {**{k: 0 for k in ("batch_id", "attempt", "num_input_rows", "num_output_rows", "watermark_ms",
                             "next_watermark_ms", "state_rows_total", "processed_rows_per_second")},
           "offsets": "", "sources": [], "state_versions": {}, "sink": "x", "sink_version": None,
           "durations_ms": {}, "query_id": "q"}
    assert lineage_metadata(rec, "r")["sink_version"] == "-"   # as `increments history` prints a missing one


def test_sensor_skips_naming_the_error_while_the_upstream_table_is_missing(tmp_path):
    root = str(tmp_path)

    def silver():
        frame = inc.read_stream.delta(os.path.join(root, "bronze"))
        return (frame.write_stream.format("parquet").checkpoint_location(os.path.join(root, "chk"))
                .query_name("silver").trigger(processing_time="1 minute"))
    defs = build_definitions([(silver, {"path": os.path.join(root, "silver")})], asset_root=root)
    sensor = defs.get_sensor_def("silver_trigger")
    with dg.DagsterInstance.ephemeral() as inst:
        res = sensor.evaluate_tick(dg.build_sensor_context(instance=inst))
    assert not res.run_requests and "cannot start yet" in res.skip_message and "bronze" in res.skip_message


def test_sensor_requests_a_delta_source_batch_only_when_the_table_moved(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake
    root = str(tmp_path)
    bronze = os.path.join(root, "bronze")
    write_deltalake(bronze, pa.table({"id": [1, 2]}))

    def silver():
        frame = inc.read_stream.delta(bronze)
        return (frame.write_stream.format("parquet").checkpoint_location(os.path.join(root, "chk"))
                .query_name("silver").trigger(processing_time="1 minute"))
    defs = build_definitions([(silver, {"path": os.path.join(root, "silver")})], asset_root=root)
    sensor, job = defs.get_sensor_def("silver_trigger"), defs.get_job_def("silver_batch")
    with dg.DagsterInstance.ephemeral() as inst:
        assert sensor.evaluate_tick(dg.build_sensor_context(instance=inst)).run_requests
        assert inst.get_run_by_id(job.execute_in_process(instance=inst).run_id).tags["increments/outcome"] == "committed"
        res = sensor.evaluate_tick(dg.build_sensor_context(instance=inst))
        assert not res.run_requests and "no new data" in res.skip_message   # no idle run every interval
        write_deltalake(bronze, pa.table({"id": [3]}), mode="append")
        assert sensor.evaluate_tick(dg.build_sensor_context(instance=inst)).run_requests


def test_commit_step_failing_after_commits_n_is_not_refused_on_retry(tmp_path, monkeypatch):
    from increments.execution import steps
    root = str(tmp_path)
    write_files(root, "", 1)
    real, calls = steps.commit_batch, []

    def flaky(rt, plan):
        out = real(rt, plan)
        calls.append(plan.batch_id)
        if len(calls) == 1:
            raise OSError("lost the connection after commits[N] was written")
        return out
    monkeypatch.setattr(steps, "commit_batch", flaky)
    defs = build_definitions([(_files_query(root, "flaky"), {"path": os.path.join(root, "lake"), "retry_delay_s": 0.05,
                                                             "sensor_status": "stopped"})], asset_root=root)
    inst = dg.DagsterInstance.ephemeral()
    run = inst.get_run_by_id(defs.get_job_def("flaky_batch").execute_in_process(instance=inst).run_id)
    assert (run.status, run.tags["increments/outcome"]) == (dg.DagsterRunStatus.SUCCESS, "committed")
    assert calls == [0]

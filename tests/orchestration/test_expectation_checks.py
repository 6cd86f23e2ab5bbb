"""Issue 30.3, Dagster side, in process (an ephemeral instance): one asset check per expectation
on the sink, named after it; per batch a warn/drop expectation passes with no failing row and is
a WARN-severity failure (the batch committed) with the counts when rows fail; an
on_violation="fail" expectation is a blocking ERROR check that fails with the counts and sample
rows when its batch fails (nothing committed, the query halts)."""
from __future__ import annotations

import json
import os

import dagster as dg

import increments as inc
from orchestration import build_definitions

OUT = dg.AssetKey(["files", "out"])


def _query(root: str, how: str):
    def expecting():
        frame = inc.read_stream.files(os.path.join(root, "landing"), format="json", schema="id BIGINT, name STRING",
                                      max_files_per_trigger=1)
        frame = frame.expect("id small", "id < 1040", on_violation=how).expect("name_set", "name IS NOT NULL",
                                                                               on_violation="drop")
        return (frame.write_stream.format("parquet").checkpoint_location(os.path.join(root, "chk"))
                .query_name("expecting").trigger(processing_time="1 minute"))
    return expecting


def _write(root: str, f: int, null_names: int = 0) -> None:
    os.makedirs(os.path.join(root, "landing"), exist_ok=True)
    with open(os.path.join(root, "landing", f"part-{f:04d}.json"), "w") as out:
        for r in range(50):
            out.write(json.dumps({"id": f * 1000 + r, "name": None if r < null_names else f"n{r}"}) + "\n")


def _defs(root: str, how: str) -> dg.Definitions:
    return build_definitions([(_query(root, how), {"path": os.path.join(root, "out"), "sensor_status": "stopped",
                                                   "max_retries": 0, "retry_delay_s": 0.1})], asset_root=root)


def _evals(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.event_specific_data.check_name: e.event_specific_data for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def test_one_check_per_expectation_with_counts_per_batch(tmp_path):
    root = str(tmp_path)
    defs = _defs(root, "warn")
    specs = {k.name: k for k in defs.resolve_asset_graph().asset_check_keys}
    assert {"id_small", "name_set"} <= set(specs)                  # named after the expectations
    assert specs["id_small"].asset_key == OUT
    inst = dg.DagsterInstance.ephemeral()
    job = defs.get_job_def("expecting_batch")
    _write(root, 0)
    ev = _evals(job.execute_in_process(instance=inst))
    assert ev["id_small"].passed and ev["id_small"].metadata["passed_rows"].value == 50
    assert ev["id_small"].metadata["failed_rows"].value == 0
    _write(root, 1, null_names=5)
    ev = _evals(job.execute_in_process(instance=inst))
    small, named = ev["id_small"], ev["name_set"]
    assert (small.passed, small.severity) == (False, dg.AssetCheckSeverity.WARN)     # a warning: rows kept
    assert (small.metadata["passed_rows"].value, small.metadata["failed_rows"].value) == (40, 10)
    assert small.metadata["batch_id"].value == "1" and small.metadata["on_violation"].value == "warn"
    assert (named.passed, named.severity) == (False, dg.AssetCheckSeverity.WARN)
    assert (named.metadata["passed_rows"].value, named.metadata["failed_rows"].value) == (45, 5)
    assert "dropped" in named.description


def test_a_fail_expectation_is_a_blocking_check_failed_with_the_batch(tmp_path):
    root = str(tmp_path)
    defs = _defs(root, "fail")
    graph = defs.resolve_asset_graph()
    (key,) = [k for k in graph.asset_check_keys if k.name == "id_small"]
    assert graph.get_check_spec(key).blocking
    (drop_key,) = [k for k in graph.asset_check_keys if k.name == "name_set"]
    assert not graph.get_check_spec(drop_key).blocking
    inst = dg.DagsterInstance.ephemeral()
    job = defs.get_job_def("expecting_batch")
    _write(root, 0)
    assert _evals(job.execute_in_process(instance=inst))["id_small"].passed
    _write(root, 1)
    res = job.execute_in_process(instance=inst, raise_on_error=False)
    assert not res.success
    ev = {e.dagster_event.event_specific_data.check_name: e.dagster_event.event_specific_data
          for e in inst.all_logs(res.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)}["id_small"]
    assert (ev.passed, ev.severity) == (False, dg.AssetCheckSeverity.ERROR)
    assert (ev.metadata["passed_rows"].value, ev.metadata["failed_rows"].value) == (40, 10)
    assert ev.metadata["batch_id"].value == "1"
    sample = ev.metadata["sample_failing_rows"].value
    assert sample and all(r["id"] >= 1040 for r in sample)
    assert "halted" in ev.description
    latest = inst.get_latest_materialization_event(OUT).asset_materialization
    assert latest.metadata["batch_id"].value == "0"                          # batch 1 committed nothing

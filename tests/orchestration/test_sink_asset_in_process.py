"""The sink as a Dagster asset whose materialization is one micro-batch (in process, an ephemeral
instance): materializing it with no partition commits the next batch; an idle materialization
succeeds with the later steps skipped; a refused launch fails in one step with one line; a
re-execution of a committed batch's run is refused; a table two queries write stays one asset."""
from __future__ import annotations

import os

import dagster as dg

from orch_testutil import ROWS_PER_FILE, write_files

import increments as inc
from orchestration import build_definitions


def _query(root: str, name: str, out: str = "lake"):
    def factory():
        frame = inc.read_stream.files(os.path.join(root, "landing"), format="json", schema="id BIGINT, name STRING",
                                      max_files_per_trigger=1)
        return (frame.write_stream.format("parquet").output_mode("append")
                .checkpoint_location(os.path.join(root, "chk", name)).query_name(name)
                .trigger(processing_time="1 minute"))
    factory.__name__ = name
    return factory, {"path": os.path.join(root, out), "sensor_status": "stopped"}


def _events(inst, run_id: str, kind: str) -> list:
    return [e for e in inst.all_logs(run_id) if e.dagster_event and e.dagster_event.event_type_value == kind]


def _errors(inst, run_id: str) -> list[str]:
    return [e.user_message for e in inst.all_logs(run_id) if e.level >= 40 and not e.dagster_event]


def test_materializing_the_sink_runs_the_next_batch_idle_succeeds_refusal_is_one_line(tmp_path):
    root = str(tmp_path)
    write_files(root, "", 2)                                   # landing/part-0000.json, part-0001.json
    defs = build_definitions([_query(root, "mat")], asset_root=root)
    sink = dg.AssetKey(["files", "lake"])
    node = defs.resolve_asset_graph().get(sink)
    assert node.is_materializable and not node.is_partitioned       # Materialize needs no partition key
    assert node.parent_keys == {dg.AssetKey(["files", "landing"])}
    inst = dg.DagsterInstance.ephemeral()
    asset_job = defs.resolve_implicit_job_def_def_for_assets([sink])  # what the UI's Materialize launches
    runs = []
    for _ in range(2):
        res = asset_job.execute_in_process(instance=inst, asset_selection=[sink])
        runs.append(inst.get_run_by_id(res.run_id))
        assert res.success
    assert [(r.tags["increments/outcome"], r.tags["increments/batch_id"], r.tags["increments/query"])
            for r in runs] == [("committed", "0", "mat"), ("committed", "1", "mat")]
    mat = inst.get_latest_materialization_event(sink)
    assert mat.run_id == runs[1].run_id and mat.asset_materialization.partition is None
    assert mat.asset_materialization.metadata["batch_id"].value == "1"
    assert sorted(inc.read.parquet_sink(os.path.join(root, "lake")).column("id").to_pylist()) == sorted(
        f * 1000 + r for f in range(2) for r in range(ROWS_PER_FILE))
    # idle: the run succeeds, the later steps are skipped, a tag says there was nothing to do
    job = defs.resolve_job_def("mat_batch")
    idle = job.execute_in_process(instance=inst)
    assert idle.success
    run = inst.get_run_by_id(idle.run_id)
    assert run.status == dg.DagsterRunStatus.SUCCESS and run.tags["increments/outcome"] == "idle"
    assert run.tags["increments/reason"].startswith("nothing to do")
    assert not _events(inst, idle.run_id, "STEP_FAILURE") and not _errors(inst, idle.run_id)
    assert {e.step_key.rsplit(".", 1)[-1] for e in _events(inst, idle.run_id, "STEP_SKIPPED")} == {
        "read", "process", "write", "commit"}
    assert inst.get_latest_materialization_event(sink).run_id == runs[1].run_id       # nothing materialized
    # a stale batch id: one failing step, one line, no "Dependencies ... not executed" rows
    stale = job.execute_in_process(instance=inst, tags={"increments/batch_id": "0"}, raise_on_error=False)
    assert not stale.success
    fails = _events(inst, stale.run_id, "STEP_FAILURE")
    assert len(fails) == 1 and not _errors(inst, stale.run_id)
    text = fails[0].dagster_event.event_specific_data.user_failure_data.description
    assert "batch 0 is committed" in text and "launch mat_batch" in text and "\n" not in text
    assert inst.get_run_by_id(stale.run_id).tags["increments/outcome"] == "refused"
    # a re-execution of the run of committed batch 0 (it carries the parent's id, not its batch tag)
    # is refused, not a run of the next batch
    write_files(root, "", 1, start=2)
    again = job.execute_in_process(instance=inst, tags={"dagster/parent_run_id": runs[0].run_id},
                                   raise_on_error=False)
    assert not again.success
    assert "batch 0 is committed" in inst.get_run_by_id(again.run_id).tags["increments/reason"]
    nxt = job.execute_in_process(instance=inst)
    assert inst.get_run_by_id(nxt.run_id).tags["increments/batch_id"] == "2"


def test_a_table_two_queries_write_stays_one_asset_materialized_by_both_jobs(tmp_path):
    root = str(tmp_path)
    write_files(root, "", 1)
    defs = build_definitions([_query(root, "one", "shared"), _query(root, "two", "shared")], asset_root=root)
    sink = dg.AssetKey(["files", "shared"])
    node = defs.resolve_asset_graph().get(sink)
    assert not node.is_materializable                    # which query's batch would a Materialize run?
    inst = dg.DagsterInstance.ephemeral()
    for q in ("one", "two"):
        res = defs.resolve_job_def(f"{q}_batch").execute_in_process(instance=inst)
        assert inst.get_run_by_id(res.run_id).tags["increments/outcome"] == "committed"
    mats = inst.fetch_materializations(sink, limit=10).records
    assert sorted(m.event_log_entry.dagster_event.event_specific_data.materialization.metadata["batch_id"].value
                  for m in mats) == ["0", "0"]
    assert {m.run_id for m in mats} == {r.run_id for r in inst.get_runs()}

"""Bounded Dagster history (orchestration/retention.py) on a Dagster instance with PostgreSQL storage:
the retention job deletes a query's old runs with their events and asset check executions, its old
drain backfills and its sensors' old ticks, keeps the newest committed batch (the sink's latest
materialization) and never touches the SQL batch log; it is off unless retention_days is set."""
from __future__ import annotations

import os
import time

import dagster as dg
import pytest

from orch_testutil import create_db, drop_db, write_files

import increments as inc
from orchestration import build_definitions
from orchestration import dagster_internals as di
from orchestration.retention import JOB, SCHEDULE

DAY = 86400.0


def _query(root: str):
    def ret_copy():
        frame = inc.read_stream.files(os.path.join(root, "landing"), format="json", schema="id BIGINT, name STRING",
                                      max_files_per_trigger=1)
        return (frame.write_stream.format("parquet").output_mode("append")
                .checkpoint_location(os.path.join(root, "chk")).query_name("ret_copy")
                .trigger(processing_time="1 minute"))
    return ret_copy


@pytest.fixture()
def pg_instance(tmp_path):
    name, url = create_db("inc_retention")
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "storage:\n  postgres:\n    postgres_url: " + url.replace("postgresql+psycopg://", "postgresql+psycopg2://") + "\n"
        "telemetry:\n  enabled: false\n")
    inst = dg.DagsterInstance.from_config(str(home))
    try:
        yield inst
    finally:
        inst.dispose()
        drop_db(name)


def _old_backfill(inst, query: str, age_days: float) -> str:
    bf = di.get("PartitionBackfill")(
        backfill_id=di.get("make_new_backfill_id")(), status=di.get("BulkActionStatus").COMPLETED_SUCCESS,
        from_failure=False, tags={"increments/query": query}, backfill_timestamp=time.time() - age_days * DAY,
        partition_names=["batch 0"], last_submitted_partition_name="batch 0")
    inst.add_backfill(bf)
    return bf.backfill_id


def test_retention_deletes_old_history_keeps_the_latest_batch_and_the_batch_log(tmp_path, pg_instance):
    root, inst = str(tmp_path), pg_instance
    write_files(root, "", 3)
    defs = build_definitions([(_query(root), {"path": os.path.join(root, "lake"), "sensor_status": "stopped"})],
                             asset_root=root, retention_days=30)
    job = defs.get_job_def("ret_copy_batch")
    runs = [job.execute_in_process(instance=inst).run_id for _ in range(4)]       # 3 batches, then idle
    tags = [inst.get_run_by_id(r).tags for r in runs]
    assert [t["increments/outcome"] for t in tags] == ["committed"] * 3 + ["idle"]
    sink = dg.AssetKey(["files", "lake"])
    check = dg.AssetCheckKey(sink, "batch_errors")
    assert len(inst.event_log_storage.get_asset_check_execution_history(check, limit=100)) == 3
    old_bf, new_bf = _old_backfill(inst, "ret_copy", 40), _old_backfill(inst, "ret_copy", 1)
    other = _old_backfill(inst, "someone_else", 40)
    # the job, as its schedule runs it 40 days from now: everything above is older than 30 days
    sched = defs.get_schedule_def(SCHEDULE)
    assert sched.default_status == dg.DefaultScheduleStatus.RUNNING
    from orchestration.retention import purge
    counts = purge(inst, ["ret_copy"], {"ret_copy_trigger"}, 30, now_s=time.time() + 40 * DAY)
    kept = [r for r in runs if inst.get_run_by_id(r) is not None]
    assert kept == [runs[2]]                               # the newest committed batch run
    assert counts["runs"] == 3 and counts["check_executions"] >= 2 * 5
    for r in runs[:2] + runs[3:]:
        assert not inst.all_logs(r)                        # its events went with it
    history = inst.event_log_storage.get_asset_check_execution_history(check, limit=100)
    assert [h.run_id for h in history] == [runs[2]]        # check executions of deleted runs are gone
    latest = inst.get_latest_materialization_event(sink)
    assert latest is not None and latest.run_id == runs[2]
    assert inst.get_backfill(old_bf) is None and inst.get_backfill(new_bf) is None   # both ended before the cutoff
    assert inst.get_backfill(other) is not None            # another code location's: untouched
    # the job itself, as its schedule launches it (retention_days from the definitions' setting)
    write_files(root, "", 1, start=3)
    runs.append(job.execute_in_process(instance=inst).run_id)            # batch 3
    time.sleep(0.5)
    res = defs.get_job_def(JOB).execute_in_process(
        instance=inst, run_config={"ops": {"purge_old_history": {"config": {"retention_days": 0.2 / DAY}}}})
    assert res.success and inst.get_run_by_id(runs[2]) is None and inst.get_run_by_id(runs[-1]) is not None
    assert not di.ensure_storage_indexes(inst)             # the job created the check executions' index
    # the SQL batch log is untouched: `increments history` still reads every batch
    from orchestration import runner
    rt = runner.build_runtime(_query(root), os.path.join(root, "lake"))
    try:
        assert sorted(o.batch_id for o, c in rt.log.history() if c is not None) == [0, 1, 2, 3]
    finally:
        runner.close_quietly(rt)


def test_retention_is_off_unless_retention_days_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv("INCREMENTS_RETENTION_DAYS", raising=False)
    root = str(tmp_path)
    defs = build_definitions([(_query(root), {"path": os.path.join(root, "lake")})], asset_root=root)
    sched = defs.get_schedule_def(SCHEDULE)
    assert sched.default_status == dg.DefaultScheduleStatus.STOPPED
    assert defs.get_job_def(JOB) is not None
    monkeypatch.setenv("INCREMENTS_RETENTION_DAYS", "14")
    defs = build_definitions([(_query(root), {"path": os.path.join(root, "lake")})], asset_root=root)
    assert defs.get_schedule_def(SCHEDULE).default_status == dg.DefaultScheduleStatus.RUNNING
    with pytest.raises(ValueError, match="retention_days=0"):
        build_definitions([(_query(root), {"path": os.path.join(root, "lake")})], asset_root=root, retention_days=0)


@pytest.mark.dagster
def test_retention_purges_the_old_ticks_of_the_locations_sensors(dagster_env, monkeypatch):
    """On the real instance (daemon running): the trigger sensor's ticks older than the cutoff go."""
    from test_dagster_instance import wait_for

    from orchestration.retention import purge
    d = dagster_env["dagster"]
    wait_for(lambda: len(d.sensor_ticks("drain_copy_trigger")) >= 2, 120, "ticks of drain_copy_trigger")
    monkeypatch.setenv("DAGSTER_PG_URL", dagster_env["env"]["DAGSTER_PG_URL"])
    inst = dg.DagsterInstance.from_config(dagster_env["env"]["DAGSTER_HOME"])
    try:
        cut = time.time()
        counts = purge(inst, [], {"drain_copy_trigger"}, 1, now_s=cut + DAY)
    finally:
        inst.dispose()
    assert counts["instigators_purged"] == 1
    assert all(t["timestamp"] >= cut for t in d.sensor_ticks("drain_copy_trigger", limit=50))

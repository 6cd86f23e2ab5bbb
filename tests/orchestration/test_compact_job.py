"""Job <q>_compact / schedule <q>_compact_schedule of a query with a Delta sink, on a real Dagster
instance (SQLite storage in a temp dir): compaction commits while the streaming writer is alive
mid-batch, the writer then commits after it; the table's rows are unchanged, its file count
dropped, and the writer's transaction id (DeltaTable.transaction_version(query id)) survives, so
a writer SIGKILLed after its Delta commit and restarted after a compaction does not write the
batch twice."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import dagster as dg
from deltalake import DeltaTable

import compact_queries as cq
from orchestration import build_definitions

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = [sys.executable, os.path.join(HERE, "compact_queries.py")]


def _defs(root: str, **opts):
    return build_definitions([(cq.factory(root), {"path": os.path.join(root, "lake", "out"), "sensor_status": "stopped",
                                                  **opts})], asset_root=root)


def _ids(path: str) -> list[int]:
    return sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist())


def _query_id(root: str) -> str:
    return json.load(open(os.path.join(root, "chk", "metadata.json")))["id"]


def _instance(tmp_path):
    os.makedirs(tmp_path / "dagster", exist_ok=True)
    return dg.instance_for_test(temp_dir=str(tmp_path / "dagster"))


def _wait_for(path: str, proc: subprocess.Popen) -> None:
    while not os.path.exists(path):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
        time.sleep(0.05)


def test_definitions_schedule_stopped_by_default_and_options(tmp_path):
    root = str(tmp_path)
    defs = _defs(root, compact_cron="15 4 * * *", compact_z_order="campaign", vacuum_retention="48 hours")
    job = defs.get_job_def("compacted_compact")
    assert job.tags["increments/maintenance"] == "compacted"
    sched = defs.get_schedule_def("compacted_compact_schedule")
    assert sched.cron_schedule == "15 4 * * *"
    assert sched.default_status == dg.DefaultScheduleStatus.STOPPED
    assert "z-order by campaign" in job.description
    running = _defs(root, compact_schedule_status="running").get_schedule_def("compacted_compact_schedule")
    assert running.default_status == dg.DefaultScheduleStatus.RUNNING


def test_non_delta_sink_has_no_compact_job(tmp_path):
    import increments as inc

    def pq():
        return (inc.read_stream.files(str(tmp_path), "json", "id BIGINT").write_stream.format("parquet")
                .query_name("pq").checkpoint_location(str(tmp_path / "chk")).option("path", str(tmp_path / "out"))
                .trigger(available_now=True))
    defs = build_definitions([(pq, {"path": str(tmp_path / "out"), "sensor_status": "stopped"})])
    names = {j.name for j in defs.resolve_all_job_defs()}
    assert "pq_batch" in names and "pq_compact" not in names


def test_compaction_while_the_writer_runs(tmp_path):
    root = str(tmp_path)
    table = os.path.join(root, "lake", "out")
    n_files = 30
    expected = sorted(f * 1000 + r for f in range(n_files) for r in range(20))
    cq.write_input(root, n_files)
    writer = subprocess.Popen(JOB + [root, "12"], stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(os.path.join(root, "paused"), writer)      # batches 0..11 in the table, batch 12 held
        before = DeltaTable(table)
        files_before, version_before = len(before.file_uris()), before.version()
        assert files_before == 12
        qid = _query_id(root)
        assert before.transaction_version(qid) == 11
        with _instance(tmp_path) as inst:
            job = _defs(root, compact_z_order="campaign").get_job_def("compacted_compact")
            res = job.execute_in_process(instance=inst)
            assert res.success
            m = res.output_for_node("compact")
            assert (m["files_before"], m["files_removed"], m["files_after"]) == (12, 12, 1)
            obs = [e for e in res.all_events if e.event_type_value == "ASSET_OBSERVATION"]
            assert obs and obs[0].asset_key == dg.AssetKey(["delta", "lake", "out"])
            open(os.path.join(root, "go"), "w").close()          # the writer commits batch 12.. after it
            compactions = 1
            while writer.poll() is None:                          # and more compactions race its commits
                assert job.execute_in_process(instance=inst).success
                compactions += 1
            assert writer.returncode == 0, writer.stderr.read()
            assert job.execute_in_process(instance=inst).success
    finally:
        if writer.poll() is None:
            writer.kill()
    after = DeltaTable(table)
    assert _ids(table) == expected                                # every row once: content unchanged
    assert len(after.file_uris()) < n_files                       # one file per batch before compaction
    assert after.transaction_version(qid) == n_files - 1          # the writer's txn survived
    ops = [h["operation"] for h in after.history()]
    assert ops.count("OPTIMIZE") >= 2
    first_opt = min(h["version"] for h in after.history() if h["operation"] == "OPTIMIZE")
    assert first_opt > version_before
    assert any(h["operation"] == "WRITE" and h["version"] > first_opt for h in after.history())


def test_redo_after_compaction_does_not_write_twice(tmp_path):
    """SIGKILL right after batch 5's Delta commit (before commits[5]); compact; restart: the redo
    of batch 5 finds the query's transaction version 5 in the compacted table and skips."""
    root = str(tmp_path)
    table = os.path.join(root, "lake", "out")
    cq.write_input(root, 8)
    killed = subprocess.run(JOB + [root, "-", "5", "write"], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    qid = _query_id(root)
    assert DeltaTable(table).transaction_version(qid) == 5
    with _instance(tmp_path) as inst:
        res = _defs(root, vacuum_retention="0 hours").get_job_def("compacted_compact").execute_in_process(instance=inst)
        m = res.output_for_node("compact")
        assert res.success and (m["files_before"], m["files_after"]) == (6, 1)
        assert m["files_vacuumed"] == 6                            # the 6 batch files, no longer referenced
    done = subprocess.run(JOB + [root], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _ids(table) == sorted(f * 1000 + r for f in range(8) for r in range(20))
    assert DeltaTable(table).transaction_version(qid) == 7

"""Smoke: the workspace's definitions load, one job/sensor/assets/checks per registered query;
the batch job runs in process (plan refuses a stale batch id); `increments history` prints the log."""
from __future__ import annotations

import os
import subprocess
import sys

import dagster as dg

from orch_testutil import ROWS_PER_FILE, write_files

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTS_EXAMPLES_DIR", str(tmp_path))
    import importlib
    import examples.queries as q
    importlib.reload(q)
    from orchestration.factory import definitions_from_module
    return q, definitions_from_module("examples.queries")


def test_example_definitions_load(tmp_path, monkeypatch):
    _, defs = _load(tmp_path, monkeypatch)
    jobs = {j.name for j in defs.jobs}
    assert {"clicks_bronze_batch", "clicks_bronze_available_now", "hourly_clicks_batch",
            "hourly_clicks_available_now"} <= jobs
    queries = ("clicks_bronze", "clicks_silver", "hourly_clicks", "customers_bronze", "customers_silver",
               "customers_gold")                                   # the medallion pipeline too (issue 30.4)
    assert {s.name for s in defs.sensors} == {f"{q}_{k}" for q in queries for k in ("trigger", "freshness")}
    assert {s.name for s in defs.schedules} == {"hourly_clicks_available_now_schedule",
                                                "increments_retention_schedule"} | {
        f"{q}_compact_schedule" for q in queries}
    assert {f"{q}_drain" for q in queries} | {"increments_retention"} <= jobs   # drains' backfills; retention
    assert {"clicks_bronze_compact", "clicks_silver_compact", "hourly_clicks_compact"} <= jobs   # Delta sinks
    assert {"clicks_bronze_migrate", "clicks_silver_migrate", "hourly_clicks_migrate"} <= jobs   # increments migrate
    graph = defs.resolve_asset_graph()
    landing, bronze = dg.AssetKey(["files", "landing", "clicks"]), dg.AssetKey(["delta", "lake", "clicks_bronze"])
    # assets are named by what the queries read and write: one landing asset for both readers, and
    # bronze -> silver is a chain
    assert graph.get(dg.AssetKey(["delta", "lake", "hourly_clicks"])).parent_keys == {landing}
    assert graph.get(bronze).parent_keys == {landing}
    assert graph.get(dg.AssetKey(["delta", "lake", "clicks_silver"])).parent_keys == {bronze}
    # the sink is an asset whose materialization is one batch: no partitions, Materialize runs the next batch
    assert graph.get(bronze).partitions_def is None and graph.get(bronze).is_materializable
    job = defs.resolve_job_def("hourly_clicks_batch")
    assert job.tags["increments/query"] == "hourly_clicks"
    batch = job.graph.node_dict["hourly_clicks"].definition           # the sink asset's graph
    assert sorted(n.name for n in batch.nodes) == sorted(["plan", "read", "process", "write", "commit"])


def test_batch_job_in_process_and_history_cli(tmp_path, monkeypatch):
    q, defs = _load(tmp_path, monkeypatch)
    d = os.path.join(str(tmp_path), "landing", "clicks")
    os.makedirs(d)                  # importing the examples writes nothing (their sources wait for the path)
    import json
    for f in range(3):
        with open(os.path.join(d, f"c-{f}.json"), "w") as out:
            for r in range(ROWS_PER_FILE):
                out.write(json.dumps({"campaign_id": "c1", "user_id": f"u{r}",
                                      "event_time": f"2026-01-01T0{f}:00:{r % 60:02d}Z"}) + "\n")
    inst = dg.DagsterInstance.ephemeral()
    job = defs.resolve_job_def("clicks_bronze_batch")
    runs = [inst.get_run_by_id(job.execute_in_process(instance=inst, raise_on_error=False).run_id) for _ in range(3)]
    assert [r.tags.get("increments/outcome") for r in runs] == ["committed", "committed", "idle"]
    # nothing to do is not a failure: the idle run succeeds (its later steps skipped), with the reason
    assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS] * 3
    stale = inst.get_run_by_id(job.execute_in_process(
        instance=inst, tags={"increments/batch_id": "0"}, raise_on_error=False).run_id)
    assert (stale.tags["increments/outcome"], stale.status) == ("refused", dg.DagsterRunStatus.FAILURE)
    assert "batch 0 is committed" in stale.tags["increments/reason"]
    mat = inst.get_latest_materialization_event(dg.AssetKey(["delta", "lake", "clicks_bronze"])).asset_materialization
    assert mat.metadata["batch_id"].value == "1" and mat.metadata["num_output_rows"].value == ROWS_PER_FILE
    assert mat.partition is None
    assert isinstance(mat.metadata["dagster_run"], dg.DagsterRunMetadataValue)
    out = subprocess.run([sys.executable, "-m", "increments.cli", "history", "clicks_bronze"], cwd=REPO,
                         env={**os.environ, "INCREMENTS_EXAMPLES_DIR": str(tmp_path)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "batch" in lines[2] and "rows_in" in lines[2] and "sink_version" in lines[2]
    assert lines[4].startswith("| 0 ") and f"| {2 * ROWS_PER_FILE}" in lines[4]   # max_files_per_trigger=2
    assert lines[5].startswith("| 1 ") and "0: 0->1" in lines[5]

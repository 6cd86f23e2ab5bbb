"""Smoke: the workspace's definitions load, one job/sensor/assets/checks per registered query;
the batch job runs in process (plan refuses a stale batch id); `increments history` prints the log."""
from __future__ import annotations

import os
import subprocess
import sys

import dagster as dg

from orch_util import ROWS_PER_FILE, write_files

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
    assert {s.name for s in defs.sensors} == {"clicks_bronze_trigger", "hourly_clicks_trigger"}
    assert {s.name for s in defs.schedules} == {"hourly_clicks_available_now_schedule"}
    graph = defs.resolve_asset_graph()
    sink = dg.AssetKey(["sink", "hourly_clicks"])
    assert graph.get(sink).parent_keys == {dg.AssetKey(["source", "hourly_clicks", "0"])}
    job = defs.get_job_def("hourly_clicks_batch")
    assert job.tags["increments/query"] == "hourly_clicks"
    assert sorted(n.name for n in job.graph.nodes) == sorted(["plan", "read", "process", "write", "commit"])


def test_batch_job_in_process_and_history_cli(tmp_path, monkeypatch):
    q, defs = _load(tmp_path, monkeypatch)
    d = os.path.join(str(tmp_path), "landing", "clicks")
    import json
    for f in range(3):
        with open(os.path.join(d, f"c-{f}.json"), "w") as out:
            for r in range(ROWS_PER_FILE):
                out.write(json.dumps({"campaign_id": "c1", "user_id": f"u{r}",
                                      "event_time": f"2026-01-01T0{f}:00:{r % 60:02d}Z"}) + "\n")
    inst = dg.DagsterInstance.ephemeral()
    job = defs.get_job_def("clicks_bronze_batch")
    tags = []
    for _ in range(3):
        r = job.execute_in_process(instance=inst)
        tags.append(inst.get_run_by_id(r.run_id).tags)
    assert [t.get("increments/outcome") for t in tags] == ["committed", "committed", "idle"]
    stale = job.execute_in_process(instance=inst, run_config={"ops": {"plan": {"config": {"batch_id": 0}}}})
    assert inst.get_run_by_id(stale.run_id).tags["increments/outcome"] == "refused"
    mat = inst.get_latest_materialization_event(dg.AssetKey(["sink", "clicks_bronze"])).asset_materialization
    assert mat.metadata["batch_id"].value == 1 and mat.metadata["num_output_rows"].value == ROWS_PER_FILE
    out = subprocess.run([sys.executable, "-m", "increments.cli", "history", "clicks_bronze"], cwd=REPO,
                         env={**os.environ, "INCREMENTS_EXAMPLES_DIR": str(tmp_path)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "batch" in lines[2] and "rows_in" in lines[2] and "sink_version" in lines[2]
    assert lines[4].startswith("| 0 ") and f"| {2 * ROWS_PER_FILE}" in lines[4]   # max_files_per_trigger=2
    assert lines[5].startswith("| 1 ") and "0: 0->1" in lines[5]

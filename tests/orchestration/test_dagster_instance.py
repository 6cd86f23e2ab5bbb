"""Batch runs on a real Dagster instance (daemon + webserver, PostgreSQL storage, the run queue
with the per-query tag limit, run retries and monitoring): sensor and schedule drains, the refusal
of duplicate launches, a SIGKILLed run retried to exactly-once output, lineage over GraphQL and the
asset page in headless Chromium; a bad input file halting its query until one launch resumes it."""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time

import pyarrow.compute as pc
import pytest
import sqlalchemy as sa

from orch_testutil import ROWS_PER_FILE, write_files

pytestmark = pytest.mark.dagster


def wait_for(pred, timeout: float, what: str, every: float = 1.0):
    from orchestration.local_instance import timeout_scale
    timeout *= timeout_scale()
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def query_runs(d, q: str) -> list[dict]:
    return d.runs({"increments/query": q})


def committed(d, q: str) -> list[dict]:
    return sorted((r for r in query_runs(d, q)
                   if r["tags"].get("increments/outcome") == "committed" and r["status"] == "SUCCESS"),
                  key=lambda r: int(r["tags"]["increments/batch_id"]))


def delta_ids(path: str) -> list[int]:
    from deltalake import DeltaTable
    return sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist())


def parquet_ids(path: str) -> list[int]:
    import increments as inc
    t = inc.read.parquet_sink(path)
    return sorted(t.column("id").to_pylist()) if t.num_rows else []


def test_sensor_runs_drain_source_then_stop(dagster_env):
    d, root = dagster_env["dagster"], dagster_env["root"]
    runs = wait_for(lambda: len(committed(d, "sensor_copy")) >= 3 and committed(d, "sensor_copy"), 150,
                    "3 committed sensor batch runs")
    assert [r["tags"]["increments/batch_id"] for r in runs] == ["0", "1", "2"]
    assert all(r["status"] == "SUCCESS" and r["tags"].get("dagster/sensor_name") == "sensor_copy_trigger" for r in runs)
    assert delta_ids(os.path.join(root, "lake", "sensor_copy")) == sorted(
        f * 1000 + r for f in range(3) for r in range(ROWS_PER_FILE))
    # drained: two more sensor intervals launch nothing
    n = len(query_runs(d, "sensor_copy"))
    time.sleep(12)
    assert len(query_runs(d, "sensor_copy")) == n
    # new data -> the next batch, by the sensor
    write_files(root, "sensor_copy", 1, start=3)
    wait_for(lambda: len(committed(d, "sensor_copy")) == 4, 60, "batch 3 after new data")
    assert len(delta_ids(os.path.join(root, "lake", "sensor_copy"))) == 4 * ROWS_PER_FILE


def stale(d, key: list[str]) -> tuple[str, list[str]]:
    """The asset graph's sync status of an asset ("FRESH" is in sync, "STALE" is Unsynced) and why."""
    n = d.gql("""query($k: [AssetKeyInput!]) { assetNodes(assetKeys: $k) { staleStatus staleCauses {
                 reason key { path } } } }""", {"k": [{"path": key}]})["assetNodes"][0]
    return n["staleStatus"], ["/".join(c["key"]["path"]) + " " + c["reason"] for c in n["staleCauses"]]


def test_sink_is_in_sync_once_it_read_everything(dagster_env):
    """A source's observation (by the freshness sensor, after the batch) names the newest file, the
    batch read up to it: the sink is not "Unsynced". Silver, reading bronze's Delta table, is in sync
    once it read bronze's last version and Unsynced when bronze committed another batch."""
    d, root = dagster_env["dagster"], dagster_env["root"]
    bronze, silver = ["delta", "lake", "sensor_copy"], ["files", "lake", "silver_copy"]
    wait_for(lambda: len(committed(d, "sensor_copy")) >= 4, 150, "sensor_copy's batches")
    write_files(root, "sensor_copy", 1, start=4)
    wait_for(lambda: len(committed(d, "sensor_copy")) >= 5, 90, "batch 4 by the trigger sensor")
    wait_for(lambda: any(o["metadata"].get("reader") == "sensor_copy" and o["metadata"].get("files_pending") == 0
                         and float(o["timestamp"]) > committed(d, "sensor_copy")[-1]["endTime"] * 1000
                         for o in d.materializations(["files", "landing", "sensor_copy"], kind="assetObservations")),
             150, "the freshness sensor's observation after batch 4")
    assert stale(d, bronze) == ("FRESH", [])
    run = d.wait_run(d.launch("silver_copy_batch"), 180)
    assert run["tags"]["increments/outcome"] == "committed"
    assert stale(d, silver) == ("FRESH", [])
    write_files(root, "sensor_copy", 1, start=5)
    wait_for(lambda: len(committed(d, "sensor_copy")) >= 6, 90, "batch 5 by the trigger sensor")
    status, causes = stale(d, silver)
    assert status == "STALE" and any(c.startswith("delta/lake/sensor_copy") for c in causes), causes
    d.wait_run(d.launch("silver_copy_batch"), 180)
    assert stale(d, silver) == ("FRESH", [])


def test_schedule_tick_drains_available_now(dagster_env):
    d, root = dagster_env["dagster"], dagster_env["root"]
    drains = wait_for(lambda: [r for r in query_runs(d, "drain_copy")
                               if r["tags"].get("dagster/schedule_name") == "drain_copy_available_now_schedule"],
                      100, "a schedule tick's drain run")
    assert drains[-1]["jobName"] == "drain_copy_available_now"
    runs = wait_for(lambda: len(committed(d, "drain_copy")) >= 3 and committed(d, "drain_copy"), 120,
                    "3 committed drain batch runs")
    first_drain = runs[0]["tags"]["increments/drain_id"]
    assert [r["tags"]["increments/batch_id"] for r in runs[:3]] == ["0", "1", "2"]
    assert all(r["tags"]["increments/drain_id"] == first_drain for r in runs[:3])
    # the drain's start run queues its first batch; each batch queues the next (no wait for a sensor tick)
    start = d.run(runs[0]["tags"]["increments/after_run"])        # the tick's run that started the drain
    assert start["tags"].get("dagster/schedule_name") == "drain_copy_available_now_schedule"
    assert start["tags"]["increments/drain_id"] == first_drain and "dagster/backfill" in start["tags"]
    assert [r["tags"].get("increments/after_run") for r in runs[1:3]] == [runs[0]["runId"], runs[1]["runId"]]
    assert delta_ids(os.path.join(root, "lake", "drain_copy")) == sorted(
        f * 1000 + r for f in range(3) for r in range(ROWS_PER_FILE))
    eng = sa.create_engine(dagster_env["log_url"], poolclass=sa.pool.NullPool)

    def drain_done():
        with eng.connect() as c:
            return c.execute(sa.text("SELECT state, batches FROM increments_drains WHERE drain_id = :d"),
                             {"d": first_drain}).first()
    state = wait_for(lambda: (r := drain_done()) and r.state == "done" and r, 30, "the drain marked done")
    assert state.batches == 3
    eng.dispose()
    done = [o["metadata"] for o in d.materializations(["delta", "lake", "drain_copy"], kind="assetObservations")
            if o["metadata"].get("drain_id") == first_drain and o["metadata"].get("drain_state") == "done"]
    assert [o["drain_batches"] for o in done] == [3]            # as increments_drains and `increments history`


def test_two_launches_one_commits_the_other_is_refused(dagster_env, tmp_path):
    d, root = dagster_env["dagster"], dagster_env["root"]
    write_files(root, "manual_copy", 2)
    tags = {"increments/batch_id": "0"}                   # as the sensor's request for batch 0
    a, b = d.launch("manual_copy_batch", tags=tags), d.launch("manual_copy_batch", tags=tags)
    ra, rb = d.wait_run(a, 120), d.wait_run(b, 120)
    # the refused run fails in one step with one line (why, what to launch), and is not retried
    assert sorted([(r["tags"]["increments/outcome"], r["status"]) for r in (ra, rb)]) == [
        ("committed", "SUCCESS"), ("refused", "FAILURE")]
    refused = ra if ra["status"] == "FAILURE" else rb
    assert any(s in refused["tags"]["increments/reason"] for s in ("is committed", "owned by", "cannot run"))
    assert_one_failing_step(d, refused["runId"])
    # launchpad with no config: the next batch; a re-execution of batch 0's run is refused
    nxt = d.wait_run(d.launch("manual_copy_batch"), 120)
    assert (nxt["tags"]["increments/outcome"], nxt["tags"]["increments/batch_id"]) == ("committed", "1")
    first = ra if ra["status"] == "SUCCESS" else rb
    again = d.wait_run(d.reexecute(first["runId"]), 120)
    assert (again["tags"]["increments/outcome"], again["status"]) == ("refused", "FAILURE")
    assert "batch 0 is committed" in again["tags"]["increments/reason"]
    assert "launch manual_copy_batch" in assert_one_failing_step(d, again["runId"])
    run_page_shows_one_line(d, again["runId"], tmp_path)
    # nothing to do is not a failure: Success, the later steps skipped, a tag saying so
    idle = d.wait_run(d.launch("manual_copy_batch"), 120)
    assert (idle["tags"]["increments/outcome"], idle["status"]) == ("idle", "SUCCESS")
    assert idle["tags"]["increments/reason"].startswith("nothing to do")
    events = d.run_events(idle["runId"])
    assert "ExecutionStepFailureEvent" not in {e["__typename"] for e in events}
    assert not [e for e in events if e.get("level") == "ERROR"]
    time.sleep(5)
    assert not [r for r in query_runs(d, "manual_copy")
                if r["tags"].get("dagster/parent_run_id") and r["runId"] != again["runId"]]   # no retries
    assert parquet_ids(os.path.join(root, "lake", "manual_copy")) == sorted(
        f * 1000 + r for f in range(2) for r in range(ROWS_PER_FILE))


def assert_one_failing_step(d, run_id: str) -> str:
    """The run failed in one step (one line, no "Dependencies ... not executed" rows): its message."""
    events = d.run_events(run_id)
    fails = [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    assert len(fails) == 1, fails
    assert not [e for e in events if e.get("level") == "ERROR" and e["__typename"] == "LogMessageEvent"], events
    text = fails[0]["failureMetadata"]["description"]
    assert "\n" not in text
    return text


def run_page_shows_one_line(d, run_id: str, tmp_path) -> None:
    """The refused run's page in Chromium: the reason as one line, no stack trace."""
    dom = _chromium(f"{d.url}/runs/{run_id}", tmp_path, "refused_run", rendered="is committed")
    assert "batch 0 is committed" in dom and "launch manual_copy_batch" in dom
    assert "Stack Trace" not in dom and "Traceback" not in dom and "Not executing" not in dom


def test_materializing_the_sink_asset_runs_the_next_batch(dagster_env):
    """As the asset graph's Materialize button: Dagster's asset job, no partition, no config; the
    asset page lists the query's trigger sensor; an idle materialization succeeds."""
    d, root = dagster_env["dagster"], dagster_env["root"]
    key = ["files", "lake", "manual_copy"]
    node = d.gql("""query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode {
                     isMaterializable isPartitioned jobNames targetingInstigators { __typename
                     ... on Sensor { name } ... on Schedule { name } } } } }""", {"k": {"path": key}})["assetNodeOrError"]
    assert node["isMaterializable"] and not node["isPartitioned"]
    assert "manual_copy_batch" in node["jobNames"]
    assert {"name": "manual_copy_trigger", "__typename": "Sensor"} in node["targetingInstigators"]
    wait_for(lambda: not [r for r in query_runs(d, "manual_copy") if r["status"] not in ("SUCCESS", "FAILURE",
                                                                                        "CANCELED")], 120, "idle")
    before = {int(m["metadata"]["batch_id"]) for m in d.materializations(key)}
    write_files(root, "manual_copy", 1, start=10)
    run = d.wait_run(d.materialize(key), 180)
    assert run["status"] == "SUCCESS" and run["tags"]["increments/outcome"] == "committed"
    b = int(run["tags"]["increments/batch_id"])
    assert b not in before and b == max(before | {-1}) + 1
    mats = d.materializations(key)
    assert mats[0]["runId"] == run["runId"] and mats[0]["partition"] is None and mats[0]["metadata"]["batch_id"] == str(b)
    idle = d.wait_run(d.materialize(key), 180)
    assert (idle["status"], idle["tags"]["increments/outcome"]) == ("SUCCESS", "idle")
    assert "ExecutionStepFailureEvent" not in {e["__typename"] for e in d.run_events(idle["runId"])}
    assert d.materializations(key)[0]["runId"] == run["runId"]          # nothing materialized


def ui_materialize(d, key: list[str]) -> str:
    """Materialize as the asset page's button does: Dagster's asset job with the asset and all
    its checks selected (the checks then run as steps after commit); the run id."""
    checks = d.gql("""query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode {
                      assetChecksOrError { ... on AssetChecks { checks { name } } } } } }""",
                   {"k": {"path": key}})["assetNodeOrError"]["assetChecksOrError"]["checks"]
    q = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
             ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
    p = {"selector": {"repositoryLocationName": d.location, "repositoryName": "__repository__", "jobName": "__ASSET_JOB",
                      "assetSelection": [{"path": key}],
                      "assetCheckSelection": [{"assetKey": {"path": key}, "name": c["name"]} for c in checks]},
         "runConfigData": {}, "executionMetadata": {"tags": [{"key": "dagster/from_ui", "value": "true"}]}}
    res = d.gql(q, {"p": p})["launchRun"]
    assert res["__typename"] == "LaunchRunSuccess", res
    return res["run"]["runId"]


def test_one_run_per_query_in_flight_also_for_materializations(dagster_env):
    """Two Materializes from the asset page (Dagster's asset job: no job tags) and a launch of the
    batch job at once: the query's pool (run granularity, one slot) queues them one after the
    other, so none is refused by the log's fence; each check is evaluated once per batch."""
    d, root = dagster_env["dagster"], dagster_env["root"]
    key = ["files", "lake", "manual_copy"]
    wait_for(lambda: not [r for r in query_runs(d, "manual_copy") if r["status"] not in ("SUCCESS", "FAILURE",
                                                                                        "CANCELED")], 120, "idle")
    write_files(root, "manual_copy", 2, start=20)
    ids = [ui_materialize(d, key), ui_materialize(d, key), d.launch("manual_copy_batch")]
    runs = sorted((d.wait_run(i, 300) for i in ids), key=lambda r: r["startTime"])
    assert [r["status"] for r in runs] == ["SUCCESS"] * 3, runs
    assert sorted(r["tags"]["increments/outcome"] for r in runs) == ["committed", "committed", "idle"]
    for a, b in zip(runs, runs[1:]):             # the queue started each after the previous one ended
        assert b["startTime"] >= a["endTime"], (a, b)
    mats = [r for r in runs if r["tags"]["increments/outcome"] == "committed"]
    assert int(mats[1]["tags"]["increments/batch_id"]) == int(mats[0]["tags"]["increments/batch_id"]) + 1
    for r in mats:
        if r["runId"] in ids[:2]:                # the checks ran as steps: one evaluation each, after commit
            evals = [e for e in d.run_events(r["runId"]) if e["__typename"] == "AssetCheckEvaluationEvent"]
            names = [e["message"] for e in evals]
            assert len(names) == len(set(names)) and any("batch_errors" in n for n in names), names


def test_killed_run_is_retried_to_exactly_once(dagster_env):
    d, root = dagster_env["dagster"], dagster_env["root"]
    write_files(root, "kill_copy", 2)
    open(os.path.join(root, "pause-kill_copy"), "w").close()
    run_id = d.launch("kill_copy_batch")
    pid_file = os.path.join(root, "kill_copy.pid")
    wait_for(lambda: os.path.exists(pid_file), 90, "the run to write its batch and pause")
    os.kill(int(open(pid_file).read()), signal.SIGKILL)
    assert d.wait_run(run_id, 60)["status"] == "FAILURE"
    retry = wait_for(lambda: [r for r in query_runs(d, "kill_copy") if r["tags"].get("dagster/parent_run_id") == run_id],
                     90, "the automatic retry")[0]
    retry = d.wait_run(retry["runId"], 120)
    assert retry["status"] == "SUCCESS"
    assert retry["tags"]["increments/batch_id"] == "0"
    assert "increments/attempt" not in retry["tags"] and "increments/offsets" not in retry["tags"]   # metadata now
    mat = [m for m in d.materializations(["files", "lake", "kill_copy"]) if m["runId"] == retry["runId"]]
    assert mat[0]["metadata"]["attempt"] == "2"
    nxt = d.wait_run(d.launch("kill_copy_batch"), 120)
    assert nxt["tags"]["increments/batch_id"] == "1"
    assert parquet_ids(os.path.join(root, "lake", "kill_copy")) == sorted(
        f * 1000 + r for f in range(2) for r in range(ROWS_PER_FILE))


def test_graphql_returns_batch_lineage(dagster_env):
    d = dagster_env["dagster"]
    wait_for(lambda: len(committed(d, "sensor_copy")) >= 3, 150, "sensor batches")
    mats = d.materializations(["delta", "lake", "sensor_copy"])
    by_batch = {int(m["metadata"]["batch_id"]): m for m in mats}      # text: an identifier, not plotted
    assert {0, 1, 2} <= set(by_batch)
    assert all(m["partition"] is None for m in by_batch.values())          # batch N: metadata batch_id
    assert by_batch[1]["metadata"]["dagster_run"] == by_batch[1]["runId"]   # a link to the run
    m = by_batch[1]["metadata"]
    assert m["offsets"] == "0: 0 -> 1"
    assert m["num_input_rows"] == m["num_output_rows"] == ROWS_PER_FILE
    assert m["sink_version"] == 1 and "DeltaSink" in m["sink"]
    for key in ("state_versions", "durations_ms", "batch_duration_ms", "dagster_run_id", "sources",
                "dagster/row_count", "dagster/uri", "read"):
        assert key in m
    assert "watermark" not in m                  # a query without a watermark shows none (no 1970 epoch)
    runs = {r["runId"]: r for r in committed(d, "sensor_copy")}
    assert runs[by_batch[1]["runId"]]["tags"]["increments/batch_id"] == "1"
    checks = d.gql("""{ assetNodes(assetKeys: [{path: ["delta", "lake", "sensor_copy"]}]) { assetChecksOrError {
                        ... on AssetChecks { checks { name executionForLatestMaterialization { status } } } } } }""")
    names = {c["name"]: c for c in checks["assetNodes"][0]["assetChecksOrError"]["checks"]}
    assert set(names) == {"processed_rate", "batch_duration", "state_rows", "batch_errors", "freshness"}   # no Kafka
    # source, no watermark: no kafka_lag, no watermark_lag
    # lineage across queries: silver_copy reads sensor_copy's Delta table
    nodes = d.gql("""{ assetNodes(assetKeys: [{path: ["files", "lake", "silver_copy"]}, {path: ["delta", "lake",
                       "sensor_copy"]}]) { assetKey { path } dependencyKeys { path } } }""")["assetNodes"]
    deps = {"/".join(n["assetKey"]["path"]): ["/".join(k["path"]) for k in n["dependencyKeys"]] for n in nodes}
    assert deps == {"files/lake/silver_copy": ["delta/lake/sensor_copy"], "delta/lake/sensor_copy": ["files/landing/sensor_copy"]}
    # the landing directory is an observable source asset, observed by the reader's freshness sensor
    src = d.gql("""{ assetNodes(assetKeys: [{path: ["files", "landing", "sensor_copy"]}]) { isObservable
                     targetingInstigators { ... on Sensor { name } } } }""")["assetNodes"][0]
    assert src["isObservable"] and {"name": "sensor_copy_freshness"} in src["targetingInstigators"]


def _chromium(url: str, tmp_path, name: str, rendered: str | None = None) -> str:
    """The page's DOM after its scripts ran; a screenshot beside it (kept in
    $INCREMENTS_SCREENSHOT_DIR when set). `rendered`: a text the page shows once its GraphQL
    answers arrived; the DOM is dumped again (up to 3 times) until it holds it, since
    --virtual-time-budget does not wait for a slow webserver's answers."""
    base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--virtual-time-budget=20000", "--window-size=1600,1200"]
    for _ in range(3):
        dom = subprocess.run(base + [f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120).stdout
        if rendered is None or rendered in dom:
            break
    shot = os.path.join(os.environ.get("INCREMENTS_SCREENSHOT_DIR") or str(tmp_path), f"{name}.png")
    subprocess.run(base + [f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}", f"--screenshot={shot}", url],
                   capture_output=True, timeout=120)
    assert os.path.exists(shot) and os.path.getsize(shot) > 10_000
    return dom


def test_asset_page_shows_batch_history_in_chromium(dagster_env, tmp_path):
    d = dagster_env["dagster"]
    runs = wait_for(lambda: len(committed(d, "sensor_copy")) >= 3 and committed(d, "sensor_copy"), 150, "batches")
    dom = _chromium(f"{d.url}/assets/delta/lake/sensor_copy?view=events", tmp_path, "asset_events", rendered="batch_id")
    assert "sensor_copy" in dom
    assert "batch_id" in dom, "the asset's events view should list batch materializations with their metadata"
    assert any(r["runId"][:8] in dom for r in runs), "the events view should name the batch runs"
    # the runs list of a query: a refused run fails, idle runs succeed beside committed ones
    wait_for(lambda: [r for r in query_runs(d, "manual_copy") if r["tags"].get("increments/outcome") == "idle"],
             300, "an idle run")
    dom = _chromium(f"{d.url}/runs?q%5B0%5D=tag%3Aincrements%2Fquery%3Dmanual_copy", tmp_path, "runs_list", rendered="Success")
    assert "Failure" in dom and "Success" in dom
    # the sink's asset page: a materializable asset (no partitions) and the sensor under Automations
    dom = _chromium(f"{d.url}/assets/files/lake/manual_copy", tmp_path, "asset_overview", rendered="manual_copy_trigger")
    assert "Materialize" in dom and "manual_copy_trigger" in dom
    assert "No automations found" not in dom and "Asset does not have a definition" not in dom
    # an idle run: Success, its later steps skipped, no error
    idle = wait_for(lambda: [r for r in query_runs(d, "manual_copy") if r["tags"].get("increments/outcome") == "idle"
                             and r["status"] == "SUCCESS"], 120, "an idle run")[0]
    dom = _chromium(f"{d.url}/runs/{idle['runId']}", tmp_path, "idle_run", rendered="Skipped")
    assert "Success" in dom and "Skipped" in dom and "Not executing" not in dom


def test_bad_file_halts_the_query_until_one_launch_resumes_it(dagster_env, tmp_path):
    d, root, bad = dagster_env["dagster"], dagster_env["root"], dagster_env["bad_file"]
    failed = wait_for(lambda: [r for r in query_runs(d, "bad_copy") if r["status"] == "FAILURE"], 150,
                      "the failed run of batch 1")
    assert len(failed) == 1 and failed[0]["tags"]["increments/batch_id"] == "1"
    assert failed[0]["tags"]["increments/outcome"] == "failed"
    assert f"file {bad}, line 2" in failed[0]["tags"]["increments/error"]
    # the step retried in the run, backing off; the run itself is not retried
    events = d.gql("""query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { __typename
                      ... on ExecutionStepUpForRetryEvent { secondsToWait } } } } }""", {"id": failed[0]["runId"]})
    waits = [e["secondsToWait"] for e in events["logsForRun"]["events"] if e["__typename"] == "ExecutionStepUpForRetryEvent"]
    assert len(waits) == 2 and waits[1] > waits[0], waits
    # halted: the sensor says why, the check on the sink fails with file and line, the webhook was called once
    tick = wait_for(lambda: next((t for t in d.sensor_ticks("bad_copy_trigger") if "HALTED" in (t["skipReason"] or "")),
                                 None), 60, "a halted skip reason")
    assert tick["status"] == "SKIPPED"
    assert "HALTED at batch 1" in tick["skipReason"] and f"(file {bad}, line 2)" in tick["skipReason"]
    assert "launch job bad_copy_batch" in tick["skipReason"]
    # ... and each tick's row in its history says so (the sensor's cursor)
    sel = {"repositoryLocationName": d.location, "repositoryName": "__repository__", "sensorName": "bad_copy_trigger"}
    cursor = wait_for(lambda: next((t["cursor"] for t in d.gql(
        """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor { sensorState {
           ticks(limit: 5) { cursor } } } } }""", {"s": sel})["sensorOrError"]["sensorState"]["ticks"]
        if (t["cursor"] or "").startswith("halted")), None), 60, "the halted cursor")
    assert cursor.startswith(f"halted at batch 1 ({os.path.basename(bad)}, line 2), run {failed[0]['runId'][:8]}")
    dom = _chromium(f"{d.url}/locations/{d.location}/sensors/bad_copy_trigger", tmp_path, "halted_sensor",
                    rendered="halted at batch 1")
    assert "halted at batch 1" in dom
    # the asset page: the failed batch_errors check and an observation with the reason
    halt = next(o for o in d.materializations(["files", "lake", "bad_copy"], kind="assetObservations")
                if o["metadata"].get("query_state") == "halted")
    assert "batch 1" in halt["description"] and f"{bad}, line 2" in halt["description"]
    check = d.check_executions(["files", "lake", "bad_copy"], "batch_errors")[0]
    assert check["success"] is False and check["metadata"]["file"] == bad and check["metadata"]["line"] == "2"
    assert (check["metadata"]["batch_id"], check["metadata"]["attempt"]) == ("1", "3")    # text: not plotted
    dom = _chromium(f"{d.url}/assets/files/lake/bad_copy?view=checks&checkDetail=batch_errors", tmp_path,
                    "halted_asset_checks", rendered="batch_errors")
    assert "batch_errors" in dom and "halted" in dom.lower()
    hooks = wait_for(lambda: dagster_env["webhook"].received, 30, "the halt webhook")
    n = len(query_runs(d, "bad_copy"))
    time.sleep(12)                                              # two sensor intervals: nothing requested
    assert len(query_runs(d, "bad_copy")) == n
    assert len(hooks) == 1 and hooks[0]["batch_id"] == "1" and hooks[0]["query"] == "bad_copy"
    # the fix, then one action: launch the batch job; the sensor takes over again
    with open(bad, "w") as f:
        f.write('{"id": 1000, "name": "ok"}\n{"id": 1001, "name": "fixed"}\n')
    resumed = d.wait_run(d.launch("bad_copy_batch"), 120)
    assert (resumed["tags"]["increments/outcome"], resumed["tags"]["increments/batch_id"]) == ("committed", "1")
    assert d.check_executions(["files", "lake", "bad_copy"], "batch_errors")[0]["success"] is True
    write_files(root, "bad_copy", 1, start=2)
    wait_for(lambda: any(r["tags"].get("increments/batch_id") == "2" and r["tags"].get("increments/outcome") == "committed"
                         for r in query_runs(d, "bad_copy")), 90, "batch 2 by the sensor after the resume")
    assert parquet_ids(os.path.join(root, "lake", "bad_copy")) == sorted(
        list(range(ROWS_PER_FILE)) + [1000, 1001] + [2000 + r for r in range(ROWS_PER_FILE)])

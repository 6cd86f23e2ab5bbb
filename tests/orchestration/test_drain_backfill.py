"""An AvailableNow drain is one backfill on a real Dagster instance (daemon + webserver, PostgreSQL,
the run queue): listed with its batches as partitions (N of M), its runs one `<q>_batch` run per
batch, linked from the schedule tick's run; cancelling it stops the drain after the batch in flight
commits, and a later drain goes on from the next batch with the same boundaries."""
from __future__ import annotations

import os
import time

import pytest
import sqlalchemy as sa

from orch_testutil import ROWS_PER_FILE, write_files
from test_dagster_instance import parquet_ids, query_runs, wait_for

pytestmark = pytest.mark.dagster

BACKFILL = """query($id: String!) { partitionBackfillOrError(backfillId: $id) { __typename
    ... on PythonError { message stack } ... on PartitionBackfill {
    id status title description numPartitions partitionNames partitionSetName
    partitionStatusCounts { runStatus count } tags { key value }
    runs(limit: 100) { runId jobName status tags { key value } }
    cancelableRuns(limit: 100) { runId } unfinishedRuns(limit: 100) { runId status } } } }"""


def backfill(d, bid: str) -> dict:
    bf = d.gql(BACKFILL, {"id": bid})["partitionBackfillOrError"]
    assert bf["__typename"] == "PartitionBackfill", bf
    bf["tags"] = {t["key"]: t["value"] for t in bf["tags"]}
    for r in bf["runs"]:
        r["tags"] = {t["key"]: t["value"] for t in r["tags"]}
    return bf


def backfill_ended(d, bid: str, timeout: float = 300) -> dict:
    """The backfill once Dagster's backfill daemon (every 30 s) closed it."""
    return wait_for(lambda: (bf := backfill(d, bid))["status"] not in ("REQUESTED", "CANCELING") and bf,
                    timeout, f"backfill {bid} to end", every=2)


def drain_row(log_url: str, drain_id: str):
    eng = sa.create_engine(log_url, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as c:
            return c.execute(sa.text("SELECT state, batches FROM increments_drains WHERE drain_id = :d"),
                             {"d": drain_id}).first()
    finally:
        eng.dispose()


def batch_runs(bf: dict) -> dict[str, dict]:
    return {r["tags"]["dagster/partition"]: r for r in bf["runs"] if "dagster/partition" in r["tags"]}


def test_schedule_tick_starts_one_backfill_with_a_run_per_batch(dagster_env):
    d = dagster_env["dagster"]
    start = wait_for(lambda: next((r for r in reversed(query_runs(d, "drain_copy"))
                                   if r["tags"].get("dagster/schedule_name") == "drain_copy_available_now_schedule"
                                   and "dagster/backfill" in r["tags"]), None), 120, "the schedule tick's drain run")
    bid = start["tags"]["dagster/backfill"]
    # the tick -> its run -> the backfill (the run carries the backfill's id, as Dagster's own backfill runs do)
    ticks = d.gql("""query($s: ScheduleSelector!) { scheduleOrError(scheduleSelector: $s) { ... on Schedule {
                      scheduleState { ticks(limit: 20) { status runIds } } } } }""",
                  {"s": {"repositoryLocationName": d.location, "repositoryName": "__repository__",
                         "scheduleName": "drain_copy_available_now_schedule"}})
    assert any(start["runId"] in t["runIds"] for t in ticks["scheduleOrError"]["scheduleState"]["ticks"])
    bf = backfill_ended(d, bid)
    assert bf["status"] == "COMPLETED_SUCCESS"
    assert bf["title"] == "AvailableNow drain of drain_copy"
    assert bf["partitionSetName"] == "drain_copy_drain_partition_set"
    assert bf["tags"]["dagster/schedule_name"] == "drain_copy_available_now_schedule"
    # three files at max_files_per_trigger=1: three batches, one run each, N of M = 3 of 3
    assert bf["partitionNames"] == ["batch 0", "batch 1", "batch 2"] and bf["numPartitions"] == 3
    assert {c["runStatus"]: c["count"] for c in bf["partitionStatusCounts"]} == {"SUCCESS": 3}
    runs = batch_runs(bf)
    assert sorted(runs) == bf["partitionNames"]
    for name, r in runs.items():
        assert r["jobName"] == "drain_copy_batch" and r["status"] == "SUCCESS"
        # no step retried: queueing the next batch's run from the plan step works the first time
        assert "ExecutionStepUpForRetryEvent" not in {e["__typename"] for e in d.run_events(r["runId"])}
        assert r["tags"]["increments/batch_id"] == name.split()[-1]
        assert r["tags"]["increments/outcome"] == "committed"
        assert r["tags"]["increments/drain_id"] == start["tags"]["increments/drain_id"]
    assert start["runId"] in {r["runId"] for r in bf["runs"]}
    assert drain_row(dagster_env["log_url"], start["tags"]["increments/drain_id"]).state == "done"


def test_cancel_stops_the_drain_after_the_batch_in_flight_commits(dagster_env):
    d, root = dagster_env["dagster"], dagster_env["root"]
    write_files(root, "cancel_copy", 4)
    hold = os.path.join(root, "hold-cancel_copy")
    open(hold, "w").close()
    start = d.wait_run(d.launch("cancel_copy_available_now"), 120)
    assert start["status"] == "SUCCESS", [e for e in d.run_events(start["runId"]) if e.get("level") == "ERROR"]
    bid, drain_id = start["tags"]["dagster/backfill"], start["tags"]["increments/drain_id"]
    bf = backfill(d, bid)
    assert bf["status"] == "REQUESTED" and bf["partitionNames"] == [f"batch {b}" for b in range(4)]
    wait_for(lambda: os.path.exists(os.path.join(root, "held-cancel_copy-0")), 120, "batch 0 written, in flight")
    # in flight: batch 0's run is not among the backfill's cancelable runs; batch 1's run waits, not started
    bf = backfill(d, bid)
    assert bf["cancelableRuns"] == []
    waiting = [r for r in bf["unfinishedRuns"] if r["status"] == "NOT_STARTED"]
    assert len(waiting) == 1
    res = d.gql("""mutation($id: String!) { cancelPartitionBackfill(backfillId: $id) { __typename } }""", {"id": bid})
    assert res["cancelPartitionBackfill"]["__typename"] == "CancelBackfillSuccess"
    os.remove(hold)
    bf = backfill_ended(d, bid)
    assert bf["status"] == "CANCELED"
    runs = [r for r in query_runs(d, "cancel_copy") if r["jobName"] == "cancel_copy_batch"]
    assert [(r["tags"]["increments/batch_id"], r["tags"].get("increments/outcome"), r["status"]) for r in runs] == [
        ("0", "committed", "SUCCESS")]                   # batch 0 committed; batch 1's run never started
    assert d.run(waiting[0]["runId"]).get("__typename") == "RunNotFoundError"
    assert bf["partitionNames"] == ["batch 0"] and batch_runs(bf)["batch 0"]["status"] == "SUCCESS"
    assert drain_row(dagster_env["log_url"], drain_id).state == "cancelled"
    assert parquet_ids(os.path.join(root, "lake", "cancel_copy")) == list(range(ROWS_PER_FILE))
    time.sleep(12)                                       # two sensor intervals: the drain does not resume
    assert len([r for r in query_runs(d, "cancel_copy") if r["jobName"] == "cancel_copy_batch"]) == 1
    # a new drain goes on from batch 1: the same boundaries (a file each), every row once
    again = d.wait_run(d.launch("cancel_copy_available_now"), 120)
    assert again["status"] == "SUCCESS" and "dagster/backfill" in again["tags"], \
        [e for e in d.run_events(again["runId"]) if e.get("level") in ("ERROR", "INFO")]
    bf2 = backfill_ended(d, again["tags"]["dagster/backfill"])
    assert bf2["status"] == "COMPLETED_SUCCESS" and bf2["partitionNames"] == ["batch 1", "batch 2", "batch 3"]
    assert parquet_ids(os.path.join(root, "lake", "cancel_copy")) == sorted(
        f * 1000 + r for f in range(4) for r in range(ROWS_PER_FILE))

"""with_watermark(col, delay, late_rows=inc.dead_letter.delta(path)): every input row a stateful
operator drops as late lands in a real Delta table with batch_id, operator and the watermark that
dropped it, once per batch; progress counts them per operator as num_late_rows_written while
num_rows_dropped_by_watermark keeps Spark's meaning (groups for window aggregations)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from deltalake import DeltaTable

import increments as inc
from agg_testutil import hm, metrics, row as r, run
from increments import functions as F
from join_testutil import COND, DROPPED, scenario_sources
from join_testutil import run as run_join

HERE = os.path.dirname(os.path.abspath(__file__))


def late_rows(path) -> list[dict]:
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return sorted(({k: hm(v) for k, v in x.items() if k != "written_at"} for x in rows), key=repr)


def written(progress) -> list[int]:
    return [p["state_operators"][0].get("num_late_rows_written") for p in progress]


def dropped(progress) -> list[int]:
    return [p["state_operators"][0]["num_rows_dropped_by_watermark"] for p in progress]


DL = [[r("a", "10:30"), r("b", "10:31")],
      [r("c", "10:40")],
      [r("a", "10:20:59"), r("a", "10:21"), r("a", "10:21:01"), r("c", "10:29"), r("b", "10:05"), r("e", "10:42")],
      [r("f", "10:32")]]


def test_dedup_late_rows_to_delta(tmp_path):
    dlq = tmp_path / "late"
    out, prog, _ = run(tmp_path, DL, lambda df: df.with_watermark(
        "ts", "10 minutes", late_rows=inc.dead_letter.delta(str(dlq))).drop_duplicates(["id", "ts"]), "append", "memory")
    assert out[2] == [("a", "10:21:01", 1), ("c", "10:29", 1), ("e", "10:42", 1)]
    rows = late_rows(dlq)
    assert [(x["id"], x["ts"], x["v"]) for x in rows] == [("a", "10:20:59", 1), ("a", "10:21", 1), ("b", "10:05", 1)]
    assert {(x["batch_id"], x["operator"], x["operator_id"], x["watermark"], x["side"]) for x in rows} == {
        (2, "dedupe", "0", "10:21", None)}
    assert written(prog) == [0, 0, 3, 0]
    assert dropped(prog) == [0, 0, 3, 0]


def test_without_late_rows_nothing_is_written_and_no_metric(tmp_path):
    _, prog, _ = run(tmp_path, DL, lambda df: df.with_watermark("ts", "10 minutes").drop_duplicates(["id", "ts"]),
                     "append", "memory")
    assert written(prog) == [None] * 4
    assert dropped(prog) == [0, 0, 3, 0]


WIN = [[r("a", "10:30")], [r("z", "10:30")],
       # WL = 10:20: a@10:05 twice and b@10:05 fall in [10:00, 10:10), a@10:15 in [10:10, 10:20): late;
       # a@10:25 is not. 4 late input rows in 3 (window, key) groups.
       [r("a", "10:05"), r("a", "10:05", 2), r("b", "10:05"), r("a", "10:15"), r("a", "10:25")]]


def test_window_late_rows_are_input_rows_not_groups(tmp_path):
    dlq = tmp_path / "late"
    out, prog, _ = run(tmp_path, WIN, lambda df: df.with_watermark(
        "ts", "10 minutes", late_rows=inc.dead_letter.delta(str(dlq))).group_by(F.window("ts", "10 minutes"), "id")
        .agg(F.count(), F.sum("v")), "append", "rocksdb")
    rows = late_rows(dlq)
    assert [(x["id"], x["ts"], x["v"], x["batch_id"], x["watermark"], x["operator"]) for x in rows] == [
        ("a", "10:05", 1, 2, "10:20", "stateStoreSave"), ("a", "10:05", 2, 2, "10:20", "stateStoreSave"),
        ("a", "10:15", 1, 2, "10:20", "stateStoreSave"), ("b", "10:05", 1, 2, "10:20", "stateStoreSave")]
    assert dropped(prog)[2] == 3          # Spark's metric: (window, key) groups
    assert written(prog)[2] == 4          # input rows in the side table
    assert sum(written(prog)) == 4


def test_sliding_window_row_late_for_one_window_is_written_once(tmp_path):
    dlq = tmp_path / "late"
    # WL = 10:20 in batch 2; windows of 10 minutes every 5: 10:12 is in [10:05,10:15) and [10:10,10:20),
    # both late; 10:17 is in [10:10,10:20) (late) and [10:15,10:25) (counted)
    batches = [[r("a", "10:30")], [r("z", "10:30")], [r("a", "10:12"), r("b", "10:17")]]
    out, prog, _ = run(tmp_path, batches, lambda df: df.with_watermark(
        "ts", "10 minutes", late_rows=inc.dead_letter.delta(str(dlq))).group_by(
        F.window("ts", "10 minutes", "5 minutes"), "id").count(), "update", "memory")
    assert [(x["id"], x["ts"]) for x in late_rows(dlq)] == [("a", "10:12"), ("b", "10:17")]
    assert dropped(prog)[2] == 3 and written(prog)[2] == 2
    assert (("10:15", "10:25"), "b", 1) in out[2]


def test_join_late_rows_both_sides(tmp_path):
    dlq = str(tmp_path / "late")
    i, c = scenario_sources(tmp_path)
    i = inc.read_stream.files(str(tmp_path / "imps"), "json", "imp_id STRING, ad_id BIGINT, imp_time TIMESTAMP",
                              max_files_per_trigger=1).with_watermark(
        "imp_time", "10 minutes", late_rows=inc.dead_letter.delta(dlq)).alias("i")
    c = inc.read_stream.files(str(tmp_path / "clicks"), "json", "click_id STRING, ad_id BIGINT, click_time TIMESTAMP",
                              max_files_per_trigger=1).with_watermark(
        "click_time", "10 minutes", late_rows=inc.dead_letter.delta(dlq)).alias("c")
    batches, prog = run_join(i.join(c, COND).select("i.imp_id", "c.click_id"), tmp_path)
    rows = late_rows(dlq)
    assert [(x["click_id"], x["ad_id"], x["click_time"], x["side"], x["batch_id"], x["watermark"], x["operator"])
            for x in rows] == [("cL", 1, "09:40", "right", 2, "09:50", "symmetricHashJoin")]
    assert dropped(prog) == DROPPED
    assert written(prog) == [0, 0, 1, 0, 0]


def test_two_different_late_tables_into_one_operator_are_refused(tmp_path):
    from increments.errors import AnalysisException
    a = inc.read_stream.memory("id STRING, ts TIMESTAMP").with_watermark(
        "ts", "1 minute", late_rows=inc.dead_letter.delta(str(tmp_path / "x")))
    b = inc.read_stream.memory("id STRING, ts TIMESTAMP").with_watermark(
        "ts", "1 minute", late_rows=inc.dead_letter.delta(str(tmp_path / "y")))
    with pytest.raises(AnalysisException, match="different late_rows tables"):
        (a.union(b).drop_duplicates(["id", "ts"]).write_stream.format("memory").query_name("two_dlq")
         .checkpoint_location(str(tmp_path / "chk")).start())


def test_sigkill_after_process_then_redo_writes_late_rows_once(tmp_path):
    """The process step wrote batch 2's late rows; the process is SIGKILLed before commits[2]; the
    restart redoes batch 2 (same rows dropped) and the app transaction keeps them from being written
    twice."""
    from jsonl_testutil import write_files
    src = write_files(str(tmp_path / "in"), DL)
    chk, dlq, out = str(tmp_path / "chk"), str(tmp_path / "late"), str(tmp_path / "out")
    job = [sys.executable, os.path.join(HERE, "late_rows_crash_query.py"), src, chk, dlq, out]
    killed = subprocess.run(job + ["2", "process"], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    dt = DeltaTable(dlq)
    assert dt.to_pyarrow_table().num_rows == 3
    version = dt.version()
    done = subprocess.run(job, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    dt = DeltaTable(dlq)
    assert dt.version() == version                 # the redo committed nothing to the late table
    assert sorted((x["id"], x["batch_id"]) for x in dt.to_pyarrow_table().to_pylist()) == [
        ("a", 2), ("a", 2), ("b", 2)]
    app_ids = _txn_app_ids(dlq)
    assert len(app_ids) == 1 and app_ids[0].startswith("increments-late-rows:") and app_ids[0].endswith(":0")
    assert dt.transaction_version(app_ids[0]) == 2
    outs = sorted(os.listdir(out))
    assert outs == ["0.jsonl", "1.jsonl", "2.jsonl", "3.jsonl"]


def _txn_app_ids(path: str) -> list[str]:
    """The app ids of every Delta app transaction in the table's log (one per commit that carried one)."""
    import json
    log = os.path.join(path, "_delta_log")
    out = []
    for f in sorted(os.listdir(log)):
        if f.endswith(".json"):
            for line in open(os.path.join(log, f)):
                d = json.loads(line)
                if "txn" in d:
                    out.append(d["txn"]["appId"])
    return out


def test_session_window_late_rows(tmp_path):
    dlq = tmp_path / "late"
    # W after batch 1 = 10:20; in batch 2 a row is late iff ts + 5 min <= 10:20
    batches = [[r("a", "10:30")], [r("z", "10:30")], [r("a", "10:14"), r("b", "10:15"), r("c", "10:16")]]
    _, prog, _ = run(tmp_path, batches, lambda df: df.with_watermark(
        "ts", "10 minutes", late_rows=inc.dead_letter.delta(str(dlq))).group_by(
        F.session_window("ts", "5 minutes"), "id").count(), "append", "memory")
    assert [(x["id"], x["ts"], x["operator"], x["batch_id"]) for x in late_rows(dlq)] == [
        ("a", "10:14", "sessionWindowStateStoreSaveExec", 2), ("b", "10:15", "sessionWindowStateStoreSaveExec", 2)]
    assert dropped(prog)[2] == 2 and written(prog)[2] == 2


def test_partitioned_process_step_writes_each_partition_once(tmp_path):
    """The process step fanned out per state partition (as Dagster ops on separate workers run it,
    each step in its own runtime): each partition writes its own late rows under its own app
    transaction; a partition op run twice (a retried op) writes nothing twice."""
    import uuid

    from increments.execution import partitioned, steps
    from jsonl_testutil import write_files
    src = write_files(str(tmp_path / "in"), DL)
    dlq = str(tmp_path / "late")
    w = (inc.read_stream.files(src, "json", "id STRING, ts TIMESTAMP, v BIGINT", max_files_per_trigger=1)
         .with_watermark("ts", "10 minutes", late_rows=inc.dead_letter.delta(dlq)).drop_duplicates(["id", "ts"])
         .write_stream.foreach_batch(lambda t, b: None).checkpoint_location(str(tmp_path / "chk"))
         .query_name("late_fan").option("state_partitions", 3).trigger(available_now=True))

    def runtime(run_id):
        rt = w.build(staging="disk")
        rt.run_id = run_id
        return rt
    reports = []
    while True:
        run_id = uuid.uuid4().hex
        rt = runtime(run_id)
        plan = steps.plan_batch(rt)
        if plan is None:
            rt.close()
            break
        rt.staging.put_json(plan.batch_id, "plan", plan.durations_ms)
        n = plan.batch_id
        steps.read_batch(rt, steps.load_plan(rt, n))
        partitioned.split_batch(rt, steps.load_plan(rt, n))
        rt.close()
        for p in [0, 1, 2, 1]:                                 # partition 1's op runs twice
            rt = runtime(run_id)
            partitioned.process_partition(rt, steps.load_plan(rt, n), p)
            rt.close()
        rt = runtime(run_id)
        partitioned.join_partitions(rt, steps.load_plan(rt, n))
        steps.write_batch(rt, steps.load_plan(rt, n))
        reports.append(steps.commit_batch(rt, steps.load_plan(rt, n))[1])
        rt.close()
    assert [(x["id"], x["ts"], x["batch_id"]) for x in late_rows(dlq)] == [
        ("a", "10:20:59", 2), ("a", "10:21", 2), ("b", "10:05", 2)]
    assert written(reports) == [0, 0, 3, 0]
    assert all(":p" in a for a in _txn_app_ids(dlq))


class _Count(inc.StatefulProcessor):
    def init(self, handle):
        self.n = handle.get_value_state("n", "n BIGINT")

    def handle_input_rows(self, key, rows, timer_values):
        n = (self.n.get() or (0,))[0] + sum(1 for _ in rows)
        self.n.update((n,))
        yield {"id": key[0], "n": n}


def test_transform_with_state_event_time_late_rows(tmp_path):
    dlq = tmp_path / "late"
    batches = [[r("a", "10:30")], [r("z", "10:30")], [r("a", "10:15"), r("b", "10:25")]]
    out, prog, _ = run(tmp_path, batches, lambda df: df.with_watermark(
        "ts", "10 minutes", late_rows=inc.dead_letter.delta(str(dlq))).group_by("id").transform_with_state(
        _Count(), "id STRING, n BIGINT", time_mode="event_time"), "update", "memory")
    assert [(x["id"], x["ts"], x["operator"], x["batch_id"], x["watermark"]) for x in late_rows(dlq)] == [
        ("a", "10:15", "transformWithStateInPySparkExec", 2, "10:20")]
    assert dropped(prog)[2] == 1 and written(prog)[2] == 1
    assert out[2] == [("b", 1)]

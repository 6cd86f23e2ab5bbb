"""frame.expect / expect_all: per-batch counts in progress and the commit log, warn / drop / fail,
the quarantine table exactly once across a real crash, expectations anywhere in a query."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from deltalake import DeltaTable

import increments as inc
from increments import functions as F
from increments.checkpoint.log import open_log
from jsonl_testutil import write_files

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = "id BIGINT, amount DOUBLE, ts TIMESTAMP"
BATCHES = [[{"id": 1, "amount": 5.0, "ts": "2024-01-01T10:00:00Z"}, {"id": 2, "amount": -1.0, "ts": "2024-01-01T10:01:00Z"},
            {"id": None, "amount": 7.0, "ts": "2024-01-01T10:02:00Z"}],
           [{"id": 4, "amount": None, "ts": "2024-01-01T10:20:00Z"}, {"id": 5, "amount": 9.0, "ts": "2024-01-01T10:21:00Z"}],
           []]


def _run(tmp_path, build, name="q", batches=BATCHES):
    src = write_files(str(tmp_path / f"in-{name}"), batches)
    got: dict[int, list] = {}
    frame = build(inc.read_stream.files(src, "json", SCHEMA, max_files_per_trigger=1))
    chk = str(tmp_path / f"chk-{name}")
    q = (frame.write_stream.foreach_batch(lambda t, b: got.__setitem__(b, t.to_pylist())).checkpoint_location(chk)
         .query_name(name).trigger(available_now=True).start())
    q.await_termination()
    return q, got, chk


def _counts(progress):
    return [[(e["name"], e["passed"], e["failed"]) for e in p["expectations"]] for p in progress]


def test_warn_and_drop_counts_per_batch_in_progress_and_the_log(tmp_path):
    q, got, chk = _run(tmp_path, lambda f: f.expect("has_id", "id IS NOT NULL")
                       .expect_all({"positive": "amount > 0", "small": "amount < 8"}, on_violation="drop"))
    # NULL fails a condition: id NULL fails has_id (kept: warn); amount NULL fails positive and small (dropped)
    assert _counts(q.recent_progress) == [
        [("has_id", 2, 1), ("positive", 2, 1), ("small", 3, 0)],
        [("has_id", 2, 0), ("positive", 1, 1), ("small", 0, 2)],
        [("has_id", 0, 0), ("positive", 0, 0), ("small", 0, 0)]]
    assert [sorted(r["id"] or 0 for r in rows) for rows in got.values()] == [[0, 1], [], []]
    assert q.last_progress["expectations"][1] == {"name": "positive", "condition": "amount > 0",
                                                  "on_violation": "drop", "passed": 0, "failed": 0}
    meta = json.load(open(os.path.join(chk, "metadata.json")))
    log = open_log(None, chk, meta["id"])
    assert [(e["name"], e["failed"]) for e in log.get_commit(1).extra["expectations"]] == [
        ("has_id", 0), ("positive", 1), ("small", 2)]


def test_fail_halts_the_batch_uncommitted_naming_expectation_and_rows(tmp_path):
    with pytest.raises(inc.StreamingQueryException) as e:
        _run(tmp_path, lambda f: f.expect("positive", "amount > 0", on_violation="fail"), name="f")
    err = e.value.cause
    assert isinstance(err, inc.ExpectationFailed)
    assert (err.expectation, err.batch_id, err.passed, err.failed) == ("positive", 0, 2, 1)
    assert err.sample == [{"id": 2, "amount": -1.0, "ts": "2024-01-01 10:01:00+00:00"}]
    assert "expectation 'positive' (amount > 0) failed for 1 of 3 rows" in str(err) and '"amount": -1.0' in str(err)
    chk = str(tmp_path / "chk-f")
    meta = json.load(open(os.path.join(chk, "metadata.json")))
    log = open_log(None, chk, meta["id"])
    assert log.get_offsets(0) is not None and log.get_commit(0) is None
    # the expectation is a stateless step: relaxed to warn, the restart redoes batch 0 and goes on
    q, got, _ = _run(tmp_path, lambda f: f.expect("positive", "amount > 0", on_violation="warn"), name="f")
    assert [p["batch_id"] for p in q.recent_progress] == [0, 1, 2] and len(got[0]) == 3


def test_expectations_anywhere_in_a_query(tmp_path):
    """Before a watermark and an aggregation, and on the aggregation's output."""
    def build(f):
        return (f.expect_or_drop("has_amount", "amount IS NOT NULL").with_watermark("ts", "5 minutes")
                .group_by(F.window("ts", "10 minutes")).agg(F.sum("amount").alias("total"))
                .expect("total_below_10", "total < 10"))
    q, got, _ = _run(tmp_path, build, name="agg")
    assert _counts(q.recent_progress) == [
        [("has_amount", 3, 0), ("total_below_10", 0, 0)],
        [("has_amount", 1, 1), ("total_below_10", 0, 0)],
        [("has_amount", 0, 0), ("total_below_10", 0, 1)]]         # W = 10:16 closes [10:00, 10:10): total 11
    assert got[2] and got[2][0]["total"] == 11.0                  # warn: the failing row is still written


def test_quarantine_once_per_batch_across_a_sigkill(tmp_path):
    batches = [[{"id": 1, "amount": 1.0}, {"id": 2, "amount": -2.0}], [{"id": 3, "amount": -3.0}, {"id": 4, "amount": 0.0}],
               [{"id": 5, "amount": 5.0}]]
    src = write_files(str(tmp_path / "in"), batches)
    chk, qt, out = str(tmp_path / "chk"), str(tmp_path / "quarantine"), str(tmp_path / "out")
    job = [sys.executable, os.path.join(HERE, "expect_crash_query.py"), src, chk, qt, out]
    killed = subprocess.run(job + ["1", "process"], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    version = DeltaTable(qt).version()
    done = subprocess.run(job, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    dt = DeltaTable(qt)
    assert dt.version() == version                 # the redo of batch 1 committed nothing to the quarantine
    rows = sorted((r["input_id"] if "input_id" in r else r["id"], r["batch_id"], r["expectation"], r["failed_expectations"])
                  for r in dt.to_pyarrow_table().to_pylist())
    assert rows == [(2, 0, "positive_amount", ["positive_amount"]), (3, 1, "positive_amount", ["positive_amount"]),
                    (4, 1, "positive_amount", ["positive_amount"])]
    kept = sorted(json.loads(line)[0] for f in os.listdir(out) for line in open(os.path.join(out, f)))
    assert kept == [1, 5]


def test_refusals(tmp_path):
    src = inc.read_stream.memory("id BIGINT, amount DOUBLE")
    chk = str(tmp_path / "chk")
    for frame, msg in [
        (src.expect("a", "id > 0").expect("a", "amount > 0"), "already declared"),
        (src.expect("a", "amount + 1"), "not a boolean"),
        (src.expect("a", "nope > 1"), "nope"),
        (src.expect("a", "id > 0", on_violation="explode"), "on_violation='explode'"),
        (src.expect("a", "id > 0", quarantine=inc.dead_letter.delta(str(tmp_path / "qt"))), "on_violation='drop'"),
    ]:
        with pytest.raises(inc.AnalysisException, match=msg):
            frame.write_stream.format("memory").query_name(f"r{len(msg)}").checkpoint_location(chk).start()

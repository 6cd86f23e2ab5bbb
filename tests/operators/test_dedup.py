"""drop_duplicates, batch for batch as SEMANTICS.md says: rows with event_time <= WL_b are dropped
and counted (input rows) whenever the input has a watermark; within a batch the first row of a
key survives; a key is emitted iff it is not in state; with the event time in the subset keys
with event_time <= W_b are evicted (a range delete), without it state is unbounded (warned).
Expected values are derived from those rules; they were not recorded on Spark (no recorder in
docs/spark/; a recorded case: chain_spark_expected.py, dedup_agg)."""
from __future__ import annotations

import pytest

import increments as inc
from agg_testutil import STORES, metrics, row as r, run, watermarks

DL = [[r("a", "10:30"), r("b", "10:31")],
      [r("c", "10:40")],
      # WL = 10:21 (10:31 - 10 min): a@10:20:59, a@10:21 (exactly at WL) and b@10:05 are late,
      # a@10:21:01 (1 s after) is not; d twice (one survives)
      [r("a", "10:20:59"), r("a", "10:21"), r("a", "10:21:01"), r("c", "10:29"), r("c", "10:30"), r("d", "10:31"), r("d", "10:31"),
       r("b", "10:05"), r("e", "10:42")],
      # WL = 10:30: a@10:45 / c@10:45 are new event times; f twice
      [r("a", "10:45"), r("c", "10:45"), r("f", "10:32"), r("f", "10:33")]]
WMS = ["epoch", "10:21", "10:30", "10:32", "10:35"]


@pytest.mark.parametrize("store", STORES)
def test_dedup_with_event_time(tmp_path, store):
    out, prog, chk = run(tmp_path, DL, lambda df: df.with_watermark("ts", "10 minutes").drop_duplicates(["id", "ts"]),
                         "append", store)
    assert out == {0: [("a", "10:30", 1), ("b", "10:31", 1)],
                   1: [("c", "10:40", 1)],
                   2: [("a", "10:21:01", 1), ("c", "10:29", 1), ("c", "10:30", 1), ("d", "10:31", 1),
                       ("e", "10:42", 1)],
                   3: [("a", "10:45", 1), ("c", "10:45", 1), ("f", "10:32", 1), ("f", "10:33", 1)],
                   4: []}
    assert watermarks(prog) == WMS
    # batch 2 evicts keys with ts <= W = 10:30 (a@10:30, a@10:21:01, c@10:29, c@10:30): removed 4
    assert metrics(prog) == [(2, 2, 0, 0), (3, 1, 0, 0), (4, 5, 4, 3), (5, 4, 3, 0), (4, 0, 1, 0)]
    assert prog[0]["state_operators"][0]["operator_name"] == "dedupe"
    state = inc.read_state(chk, operator="0")
    assert sorted(state.column("id").to_pylist()) == ["a", "c", "c", "e"]


@pytest.mark.parametrize("store", STORES)
def test_dedup_without_event_time_keeps_keys_forever(tmp_path, store):
    out, prog, _ = run(tmp_path, DL, lambda df: df.with_watermark("ts", "10 minutes").drop_duplicates(["id"]),
                       "append", store)
    assert out == {0: [("a", "10:30", 1), ("b", "10:31", 1)], 1: [("c", "10:40", 1)],
                   2: [("d", "10:31", 1), ("e", "10:42", 1)], 3: [("f", "10:32", 1)], 4: []}
    # late rows are still dropped (the input has a watermark); nothing is ever evicted
    assert metrics(prog) == [(2, 2, 0, 0), (3, 1, 0, 0), (5, 2, 0, 3), (6, 1, 0, 0), (6, 0, 0, 0)]


@pytest.mark.parametrize("store", STORES)
def test_dedup_all_columns_without_watermark(tmp_path, store):
    batches = [[r("a", "10:00", 1), r("a", "10:00", 1), r("a", "10:00", 2)], [r("a", "10:00", 1), r("b", "10:00", 1)]]
    out, prog, _ = run(tmp_path, batches, lambda df: df.drop_duplicates(), "append", store)
    assert out == {0: [("a", "10:00", 1), ("a", "10:00", 2)], 1: [("b", "10:00", 1)]}
    assert len(prog) == 2
    assert metrics(prog) == [(2, 2, 0, 0), (3, 1, 0, 0)]


def test_unbounded_dedup_is_warned(tmp_path, caplog):
    df = inc.read_stream.memory("id STRING, ts TIMESTAMP, v BIGINT")
    with caplog.at_level("WARNING"):
        df.drop_duplicates(["id"]).write_stream.format("memory").query_name("dd_warn").build()
    assert "unbounded state" in caplog.text

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


def test_candidates_by_arrow_are_the_qualify_query():
    """The first row per key by Arrow's aggregation (integer, string, boolean, date and timestamp keys,
    nulls among them) is the QUALIFY query's answer: same rows, order, event times and partitions."""
    import datetime as dt

    import numpy as np
    import pyarrow as pa

    from increments.operators.dedup import DeduplicateOp

    rng = np.random.default_rng(7)
    n = 3000
    ts = pa.array([None if i % 97 == 0 else dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
                   + dt.timedelta(seconds=int(s)) for i, s in enumerate(rng.integers(0, 50, n))],
                  pa.timestamp("us", tz="UTC"))
    table = pa.table({"i": pa.array([None if x == 0 else int(x) for x in rng.integers(0, 40, n)], pa.int64()),
                      "s": pa.array([None if x == 0 else f"k{x}" for x in rng.integers(0, 7, n)]),
                      "b": pa.array([None if x == 2 else bool(x) for x in rng.integers(0, 3, n)]),
                      "d": pa.array([dt.date(2026, 1, 1 + int(x)) for x in rng.integers(0, 3, n)]),
                      "ts": ts, "__rn": pa.array(np.arange(n, dtype=np.int64))}).filter(pa.array(rng.random(n) < 0.8))

    for subset in (["i"], ["s", "b"], ["d", "i", "s"], ["ts", "s"]):
        for within in (False, True):
            if within and subset == ["ts", "s"]:
                continue
            op = DeduplicateOp.__new__(DeduplicateOp)
            op.subset, op.within, op.event_col = subset, within, "ts"
            op.time_in_key = not within and "ts" in subset
            op.key_cols = [c for c in subset if c != "ts"]
            names = (["ts"] if op.time_in_key else []) + op.key_cols
            for parts in (1, 2, 5):
                fast = op._candidates_arrow(table, names, parts)
                assert fast is not None
                assert fast.equals(op._candidates_sql(table, names, parts).cast(fast.schema)), (subset, within, parts)

"""drop_duplicates_within_watermark, batch for batch as SEMANTICS.md says: rows with
event_time <= WL_b are dropped (counted); a key is emitted iff not in state and stored with
expiry = event_time + delay (a dropped duplicate does not refresh it); keys with expiry <= W_b
are evicted (range scan of the by-expiry index). Expected values are derived from those rules; they were
not recorded on Spark (no recorder in docs/spark/; a recorded case: chain_spark_expected.py,
dedup_within_wm_agg)."""
from __future__ import annotations

import pytest

import increments as inc
from agg_testutil import STORES, metrics, row as r, run, watermarks
from test_dedup import DL


def within(df):
    return df.with_watermark("ts", "10 minutes").drop_duplicates_within_watermark(["id"])


@pytest.mark.parametrize("store", STORES)
def test_within_watermark(tmp_path, store):
    out, prog, chk = run(tmp_path, DL, within, "append", store)
    assert out == {0: [("a", "10:30", 1), ("b", "10:31", 1)],
                   1: [("c", "10:40", 1)],
                   # a (expires 10:40), b (10:41), c (10:50) still in state; d first of its two rows
                   2: [("d", "10:31", 1), ("e", "10:42", 1)],
                   3: [("f", "10:32", 1)],
                   4: []}
    assert watermarks(prog) == ["epoch", "10:21", "10:30", "10:32", "10:35"]
    assert metrics(prog) == [(2, 2, 0, 0), (3, 1, 0, 0), (5, 2, 0, 3), (6, 1, 0, 0), (6, 0, 0, 0)]
    assert prog[0]["state_operators"][0]["operator_name"] == "dedupeWithinWatermark"
    state = inc.read_state(chk, operator="0")
    assert sorted(state.column("id").to_pylist()) == ["a", "b", "c", "d", "e", "f"]
    assert "expires_at" in state.column_names


@pytest.mark.parametrize("store", STORES)
def test_expiry_and_reemission(tmp_path, store):
    batches = [[r("a", "10:00")],
               [r("a", "10:09"), r("b", "10:20")],   # duplicate of a (expiry stays 10:10); W_2 = 10:10
               [r("x", "10:21")],                     # a's expiry 10:10 <= W_2 -> evicted
               [r("a", "10:15")]]                     # WL = 10:10: a@10:15 is new again
    out, prog, _ = run(tmp_path, batches, within, "append", store)
    assert out[1] == [("b", "10:20", 1)]
    assert out[3] == [("a", "10:15", 1)]
    assert [m[2] for m in metrics(prog)][:3] == [0, 0, 1]


def test_within_watermark_needs_a_watermark():
    df = inc.read_stream.memory("id STRING, ts TIMESTAMP, v BIGINT")
    with pytest.raises(inc.AnalysisException, match="with_watermark"):
        df.drop_duplicates_within_watermark(["id"]).write_stream.format("memory").query_name("ww_nowm").build()


def test_store_keys_of_expiry_index_keys_sliced_in_arrow():
    """The eviction's store keys (what follows the expiry in each index key) are the bytes after it,
    also for sliced and concatenated arrays and for a null expiry."""
    import os as _os
    import random as _random

    import pyarrow as _pa

    from increments.operators.dedup import _after_expiry
    rnd = _random.Random(3)
    ks = [b"\x10" + _os.urandom(8) + b"\x10" + _os.urandom(rnd.choice([1, 4, 9])) for _ in range(3000)]
    a = _pa.array(ks, _pa.binary())
    for arr, src in ((a, ks), (a.slice(100, 2000), ks[100:2100]),
                     (_pa.concat_arrays([a.slice(5, 10), a.slice(2000)]), ks[5:15] + ks[2000:])):
        assert _after_expiry(arr).to_pylist() == [k[9:] for k in src]
    assert _after_expiry(_pa.array(ks[:3] + [b"\x01abc"], _pa.binary())).to_pylist() == [k[9:] for k in ks[:3]] + [b"abc"]

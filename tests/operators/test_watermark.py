"""The watermark each batch uses (SEMANTICS.md rules 1-3): W_0 = epoch, W_{b+1} = max(W_b, max
event time of batch b - delay), never decreasing, late rows still feed the max, rows removed by a
filter that does not mention the event time do not; exactly one trailing no-data batch iff an
evicting stateful operator exists and the last data batch raised the watermark."""
from __future__ import annotations

import pytest

from increments import functions as F
from agg_testutil import STORES, metrics, row as r, run, watermarks

B = [[r("a", "10:00"), r("b", "10:20")], [r("a", "10:05")], [r("a", "09:00"), r("c", "10:40")]]


def tumbling(df):
    return df.with_watermark("ts", "10 minutes").group_by(F.window("ts", "5 minutes"), "id").count()


@pytest.mark.parametrize("store", STORES)
def test_watermark_sequence_and_trailing_batch(tmp_path, store):
    out, prog, _ = run(tmp_path, B, tumbling, "append", store)
    # batch 1's max (10:05) is below the watermark: it stays at 10:10; a@10:05 is not late
    # (WL_1 = epoch) and its window [10:05,10:10) closes at once (end <= W_1 = 10:10); in batch 2
    # the very late a@09:00 is dropped, c@10:40 moves it to 10:30 and a trailing batch runs
    assert watermarks(prog) == ["epoch", "10:10", "10:10", "10:30"]
    assert [p["num_input_rows"] for p in prog] == [2, 1, 2, 0]
    assert out[0] == []
    assert out[1] == [(("10:00", "10:05"), "a", 1), (("10:05", "10:10"), "a", 1)]
    assert out[2] == []
    assert out[3] == [(("10:20", "10:25"), "b", 1)]
    assert [m[3] for m in metrics(prog)] == [0, 0, 1, 0]
    assert prog[2]["event_time"]["max"] == "2024-01-01T10:40:00.000Z"
    assert prog[2]["event_time"]["min"] == "2024-01-01T09:00:00.000Z"


@pytest.mark.parametrize("store", STORES)
def test_no_trailing_batch_when_last_batch_did_not_raise_it(tmp_path, store):
    out, prog, _ = run(tmp_path, B[:2], tumbling, "append", store)
    assert len(prog) == 2 and watermarks(prog) == ["epoch", "10:10"]


@pytest.mark.parametrize("store", STORES)
def test_late_rows_still_feed_the_max(tmp_path, store):
    batches = [[r("a", "10:30")], [r("a", "10:00"), r("a", "10:50")], [r("b", "10:55")]]
    out, prog, _ = run(tmp_path, batches, tumbling, "append", store)
    assert watermarks(prog) == ["epoch", "10:20", "10:40", "10:45"]


def test_stateless_query_tracks_but_never_drops(tmp_path):
    out, prog, _ = run(tmp_path, B, lambda df: df.with_watermark("ts", "10 minutes").select("id", "ts"),
                       "append", "memory")
    assert len(prog) == 3                                  # no trailing batch
    assert watermarks(prog) == ["epoch", "10:10", "10:10"]
    assert out[2] == [("a", "09:00"), ("c", "10:40")]     # very late row still emitted


@pytest.mark.parametrize("store", STORES)
def test_filter_without_event_time_does_not_feed_the_max(tmp_path, store):
    batches = [[r("a", "10:00"), r("z", "11:00")], [r("a", "10:20")]]
    out, prog, _ = run(tmp_path, batches, lambda df: tumbling(df.with_watermark("ts", "10 minutes")
                                                              .filter("id <> 'z'").select("id", "ts")),
                       "append", store)
    assert watermarks(prog)[:2] == ["epoch", "09:50"]


@pytest.mark.parametrize("store", STORES)
def test_complete_mode_has_no_trailing_batch(tmp_path, store):
    out, prog, _ = run(tmp_path, B, tumbling, "complete", store)
    assert len(prog) == 3
    assert (("09:00", "09:05"), "a", 1) in out[2]          # nothing is dropped in complete mode

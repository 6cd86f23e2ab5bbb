"""Stream-stream left semi join: each left row is emitted once, at its first match (whichever side
arrives first), with the left side's columns only.

As observed on Spark 4.3.0 (join_spark_expected.py has the full comparison): a left row that matches
when it arrives is emitted and never stored; a stored left row is emitted when a new right row
matches it and then leaves the state; a new right row already behind its state watermark is not
stored, so a new left row of the same batch does not see it (i5/c5 in batch 2 are not emitted,
unlike inner, where new rows always meet)."""
from __future__ import annotations

import pytest

import increments as inc
from join_testutil import COND, WATERMARKS, join_op, run, scenario_sources

SEMI = {0: {"i1"}, 1: set(), 2: {"i4"}, 3: {"i7", "i9"}, 4: set()}
SEMI_STATE = [(2, 2, 0, 0), (6, 4, 0, 0), (4, 3, 5, 1), (5, 1, 0, 0), (1, 0, 4, 0)]  # Spark 4.3.0


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_scenario_batch_by_batch(tmp_path, state_store):
    imps, clicks = scenario_sources(tmp_path)
    batches, progress = run(imps.join(clicks, COND, "left_semi"), tmp_path, state_store)
    assert {b: {r["imp_id"] for r in rows} for b, rows in batches.items()} == SEMI
    assert sum(len(rows) for rows in batches.values()) == 4          # i1 matched twice, emitted once
    assert list(batches[0][0]) == ["imp_id", "ad_id", "imp_time"]
    assert [p["event_time"]["watermark"] for p in progress] == WATERMARKS
    assert [(op["num_rows_total"], op["num_rows_updated"], op["num_rows_removed"], op["num_rows_dropped_by_watermark"])
            for op in map(join_op, progress)] == SEMI_STATE


def test_select_after_semi_with_qualified_names(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    batches, _ = run(imps.join(clicks, COND, "semi").select("i.imp_id", "i.ad_id * 10 AS x"), tmp_path)
    assert {(r["imp_id"], r["x"]) for r in batches[3]} == {("i7", 70), ("i9", 90)}


def test_refused_without_time_bound(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    with pytest.raises(inc.AnalysisException, match="left_semi stream-stream join refused"):
        run(imps.join(clicks, "c.ad_id = i.ad_id", "left_semi"), tmp_path)

"""Stream-stream left semi join: each left row is emitted once, at its first match (whichever side
arrives first), with the left side's columns only."""
from __future__ import annotations

import pytest

import increments as inc
from join_testutil import COND, check_scenario_metrics, run, scenario_sources

SEMI = {0: {"i1"}, 1: set(), 2: {"i4", "i5"}, 3: {"i7", "i9"}, 4: set()}


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_scenario_batch_by_batch(tmp_path, state_store):
    imps, clicks = scenario_sources(tmp_path)
    batches, progress = run(imps.join(clicks, COND, "left_semi"), tmp_path, state_store)
    assert {b: {r["imp_id"] for r in rows} for b, rows in batches.items()} == SEMI
    assert sum(len(rows) for rows in batches.values()) == 5          # i1 matched twice, emitted once
    assert list(batches[0][0]) == ["imp_id", "ad_id", "imp_time"]
    check_scenario_metrics(progress)


def test_select_after_semi_with_qualified_names(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    batches, _ = run(imps.join(clicks, COND, "semi").select("i.imp_id", "i.ad_id * 10 AS x"), tmp_path)
    assert {(r["imp_id"], r["x"]) for r in batches[3]} == {("i7", 70), ("i9", 90)}


def test_refused_without_time_bound(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    with pytest.raises(inc.AnalysisException, match="left_semi stream-stream join refused"):
        run(imps.join(clicks, "c.ad_id = i.ad_id", "left_semi"), tmp_path)

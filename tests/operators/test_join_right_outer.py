"""Stream-stream right outer join: the mirror of left outer (unmatched right rows get NULL left
columns once, when evicted)."""
from __future__ import annotations

import pytest

import increments as inc
from join_testutil import COND, INNER, RIGHT_NULLS, check_scenario_metrics, merge, pairs, run, scenario_sources


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_scenario_batch_by_batch(tmp_path, state_store):
    imps, clicks = scenario_sources(tmp_path)
    q = imps.join(clicks, COND, "right_outer").select("i.imp_id", "c.click_id")
    batches, progress = run(q, tmp_path, state_store)
    assert pairs(batches) == merge(INNER, RIGHT_NULLS)
    check_scenario_metrics(progress)


def test_sides_swapped_give_the_same_rows(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    q = clicks.join(imps, COND, "left_outer").select("i.imp_id", "c.click_id")
    swapped, _ = run(q, tmp_path)
    q = imps.join(clicks, COND, "right_outer").select("i.imp_id", "c.click_id")
    right, _ = run(q, tmp_path)
    assert pairs(swapped) == pairs(right)


def test_refused_without_left_watermark(tmp_path):
    imps, clicks = scenario_sources(tmp_path, imp_delay=None)
    with pytest.raises(inc.AnalysisException, match="left side has no watermark"):
        run(imps.join(clicks, COND, "right_outer"), tmp_path)

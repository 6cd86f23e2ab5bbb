"""Stream-stream full outer join: null rows for both sides, each once, when evicted."""
from __future__ import annotations

import pytest

import increments as inc
from join_testutil import (COND, INNER, LEFT_NULLS, RIGHT_NULLS, check_scenario_metrics, merge, pairs, run,
                           scenario_sources)


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_scenario_batch_by_batch(tmp_path, state_store):
    imps, clicks = scenario_sources(tmp_path)
    q = imps.join(clicks, COND, "full_outer").select("i.imp_id", "c.click_id", "i.ad_id", "c.ad_id AS click_ad")
    batches, progress = run(q, tmp_path, state_store)
    assert pairs(batches) == merge(INNER, LEFT_NULLS, RIGHT_NULLS)
    check_scenario_metrics(progress)
    c8 = next(r for r in batches[4] if r["click_id"] == "c8")
    assert c8["ad_id"] is None and c8["click_ad"] == 8


def test_each_row_appears_matched_or_null_exactly_once(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    batches, _ = run(imps.join(clicks, COND, "full_outer").select("i.imp_id", "c.click_id"), tmp_path)
    rows = [r for b in batches.values() for r in b]
    nulls_left = [r["imp_id"] for r in rows if r["click_id"] is None]
    nulls_right = [r["click_id"] for r in rows if r["imp_id"] is None]
    assert len(nulls_left) == len(set(nulls_left)) and len(nulls_right) == len(set(nulls_right))
    matched_imps = {r["imp_id"] for r in rows if r["imp_id"] and r["click_id"]}
    assert not matched_imps & set(nulls_left)


def test_refused_without_watermarks(tmp_path):
    imps, clicks = scenario_sources(tmp_path, imp_delay=None, click_delay=None)
    with pytest.raises(inc.AnalysisException) as e:
        run(imps.join(clicks, COND, "full_outer"), tmp_path)
    assert "left side has no watermark" in str(e.value) and "right side has no watermark" in str(e.value)

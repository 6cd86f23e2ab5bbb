"""Stream-stream left outer join: a left row that never matched is emitted once with NULLs, in the
batch that evicts it (also when it was accepted in that batch already behind the state
watermark); rows still in state at the end get none. Refused without bounded state."""
from __future__ import annotations

import pytest

import increments as inc
from join_testutil import (COND, INNER, LEFT_NULLS, check_scenario_metrics, merge, pairs, run,
                           scenario_sources)


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_scenario_batch_by_batch(tmp_path, state_store):
    imps, clicks = scenario_sources(tmp_path)
    q = imps.join(clicks, COND, "left_outer").select("i.imp_id", "c.click_id")
    batches, progress = run(q, tmp_path, state_store)
    assert pairs(batches) == merge(INNER, LEFT_NULLS)
    check_scenario_metrics(progress)
    # i7 is still in state at the end: never a null row for it
    assert ("i7", None) not in set().union(*pairs(batches).values())


def test_null_rows_carry_left_columns(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    batches, _ = run(imps.join(clicks, COND, "left"), tmp_path)
    row = next(r for r in batches[4] if r["imp_id"] == "i3")
    assert row["i.ad_id"] == 3 and row["imp_time"] is not None
    assert row["click_id"] is None and row["c.ad_id"] is None and row["click_time"] is None


def test_refused_without_right_watermark(tmp_path):
    imps, clicks = scenario_sources(tmp_path, click_delay=None)
    with pytest.raises(inc.AnalysisException, match="right side has no watermark"):
        run(imps.join(clicks, COND, "left_outer"), tmp_path)


def test_refused_without_time_bound(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    with pytest.raises(inc.AnalysisException, match="does not bound"):
        run(imps.join(clicks, "c.ad_id = i.ad_id", "left_outer"), tmp_path)


def test_refused_with_a_one_sided_bound(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    with pytest.raises(inc.AnalysisException, match="unbounded"):
        run(imps.join(clicks, "c.ad_id = i.ad_id AND c.click_time >= i.imp_time", "left_outer"), tmp_path)


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
@pytest.mark.parametrize("crash", [(2, "process"), (2, "write"), (4, "process")])
def test_sigkill_then_restart_gives_the_same_batches(tmp_path, state_store, crash):
    """SIGKILL after a step of batch N (state N may be committed, commits[N] is not): the restart
    redoes N from state N-1 and every batch's output is exactly the uncrashed one."""
    import json
    import os
    import signal
    import subprocess
    import sys
    scenario_sources(tmp_path)  # writes the input files
    script = os.path.join(os.path.dirname(__file__), "join_crash_query.py")
    args = [sys.executable, script, str(tmp_path / "imps"), str(tmp_path / "clicks"), str(tmp_path / "chk"),
            str(tmp_path / "out"), state_store]
    first = subprocess.run(args + [str(crash[0]), crash[1]], cwd=os.getcwd(), capture_output=True, text=True)
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = subprocess.run(args, cwd=os.getcwd(), capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    got = {}
    for b in range(5):
        with open(tmp_path / "out" / f"{b}.jsonl") as f:
            got[b] = {(r["imp_id"], r["click_id"]) for r in map(json.loads, f)}
    assert got == merge(INNER, LEFT_NULLS)

"""Stream-stream inner join: pairs exactly once across batches in both arrival orders, late rows,
state metrics, the trailing batch, unbounded-state warnings, the watermark policy."""
from __future__ import annotations

import pytest

import increments as inc
from join_testutil import (COND, INNER, check_scenario_metrics, join_op, pairs, run, scenario_sources,
                           write_files)


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_scenario_batch_by_batch(tmp_path, state_store):
    imps, clicks = scenario_sources(tmp_path)
    q = imps.join(clicks, COND, "inner").select("i.imp_id", "c.click_id", "i.ad_id", "c.click_time")
    batches, progress = run(q, tmp_path, state_store)
    assert pairs(batches) == INNER
    check_scenario_metrics(progress)
    assert list(batches[0][0]) == ["imp_id", "click_id", "ad_id", "click_time"]
    assert not any(p["warnings"] for p in progress)


def test_without_select_both_sides_columns_and_qualified_names(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    batches, _ = run(imps.join(clicks, COND), tmp_path)
    # colliding names are qualified by the aliases; the rest keep their names
    assert list(batches[0][0]) == ["imp_id", "i.ad_id", "imp_time", "click_id", "c.ad_id", "click_time"]
    # a filter after the join may reference qualified columns
    batches, _ = run(imps.join(clicks, COND).filter("c.ad_id > 4").select("i.*", "click_id"), tmp_path)
    assert pairs(batches) == {0: set(), 1: set(), 2: {("i5", "c5")}, 3: {("i7", "c7"), ("i9", "c9")}, 4: set()}
    assert list(batches[3][0]) == ["imp_id", "ad_id", "imp_time", "click_id"]


def _seq_sources(tmp, n_batches, per_batch, click_watermark=True):
    """Batch b: per_batch imps at 10-minute steps and a click 5 minutes after each (same ad)."""
    imps, clicks = [], []
    for b in range(n_batches):
        ib, cb = [], []
        for k in range(per_batch):
            minute = (b * per_batch + k) * 10
            base = minute * 60
            ib.append({"imp_id": f"i{b}_{k}", "ad_id": b * per_batch + k, "imp_time": _iso(base)})
            cb.append({"click_id": f"c{b}_{k}", "ad_id": b * per_batch + k, "click_time": _iso(base + 300)})
        imps.append(ib)
        clicks.append(cb)
    i = inc.read_stream.files(write_files(str(tmp / "imps"), imps), "json",
                              "imp_id STRING, ad_id BIGINT, imp_time TIMESTAMP", max_files_per_trigger=1)
    c = inc.read_stream.files(write_files(str(tmp / "clicks"), clicks), "json",
                              "click_id STRING, ad_id BIGINT, click_time TIMESTAMP", max_files_per_trigger=1)
    i = i.with_watermark("imp_time", "10 minutes")
    if click_watermark:
        c = c.with_watermark("click_time", "10 minutes")
    return i.alias("i"), c.alias("c")


def _iso(seconds: int) -> str:
    import datetime as dt
    return (dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_state_stays_flat_with_both_watermarks(tmp_path, state_store):
    n, per = 30, 4
    imps, clicks = _seq_sources(tmp_path, n, per)
    batches, progress = run(imps.join(clicks, COND).select("i.imp_id", "c.click_id"), tmp_path, state_store)
    got = set().union(*pairs(batches).values())
    assert got == {(f"i{b}_{k}", f"c{b}_{k}") for b in range(n) for k in range(per)}
    assert sum(len(v) for v in batches.values()) == n * per            # each pair exactly once
    totals = [join_op(p)["num_rows_total"] for p in progress]
    assert len(progress) == n + 1                                      # + the trailing no-data batch
    assert max(totals[5:]) == max(totals[5:10])                        # flat: does not grow with traffic
    assert max(totals) < 4 * 2 * per
    assert sum(join_op(p)["num_rows_removed"] for p in progress) > n * per


def test_state_grows_without_a_watermark_and_warns(tmp_path, caplog):
    n, per = 12, 3
    imps, clicks = _seq_sources(tmp_path, n, per, click_watermark=False)
    with caplog.at_level("WARNING", logger="increments.join"):
        batches, progress = run(imps.join(clicks, COND).select("i.imp_id", "c.click_id"), tmp_path)
    assert sum(len(v) for v in batches.values()) == n * per
    totals = [join_op(p)["num_rows_total"] for p in progress]
    assert totals == [2 * per * (b + 1) for b in range(n)]             # everything kept, no trailing batch
    assert all("unbounded" in w for p in progress for w in p["warnings"]) and progress[0]["warnings"]
    assert "right side has no watermark" in progress[0]["warnings"][0]
    assert any("unbounded" in r.getMessage() for r in caplog.records)


def test_no_time_bound_warns(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    batches, progress = run(imps.join(clicks, "c.ad_id = i.ad_id").select("i.imp_id", "c.click_id"), tmp_path)
    assert ("i1", "c1b") in set().union(*pairs(batches).values())
    assert "does not bound" in progress[0]["warnings"][0]
    assert len(progress) == 4                                          # nothing evicts: no trailing batch


def test_column_list_on_keeps_one_key(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    batches, _ = run(imps.join(clicks, ["ad_id"]), tmp_path)
    assert list(batches[0][0]) == ["ad_id", "imp_id", "imp_time", "click_id", "click_time"]
    assert pairs(batches)[1] == {("i1", "c1b")}


def test_max_watermark_policy(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    _, progress = run(imps.join(clicks, COND).select("i.imp_id", "c.click_id"), tmp_path,
                      multiple_watermark_policy="max")
    # after batch 0: imps 09:50, clicks 10:10 -> max 10:10; after batch 1: imps 11:50, clicks 12:30
    assert [p["event_time"]["watermark"] for p in progress][:3] == [
        "1970-01-01T00:00:00.000Z", "2024-01-01T10:10:00.000Z", "2024-01-01T12:30:00.000Z"]
    # batch 3 uses WL = 12:30: i9 (12:00) is late now
    assert join_op(progress[3])["num_rows_dropped_by_watermark"] == 1

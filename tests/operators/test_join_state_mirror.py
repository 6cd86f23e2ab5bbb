"""The stream-stream join keeps the chunks it wrote decoded between batches (join.py, _take_mirrors)
instead of reading every chunk from the store per batch. What it keeps must be exactly what the
store holds whenever it is used, and nothing kept may be used for a store loaded at another state
(a redo of a batch, or a version another runner committed)."""
from __future__ import annotations

import pyarrow as pa
import pytest

from increments.operators import join as J
from increments.operators import join_state as js
from join_testutil import COND, INNER, LEFT_NULLS, RIGHT_NULLS, merge, pairs, run, scenario_sources


def _same(mirror: dict, store, side: str) -> None:
    stored = js.scan(store, side)
    assert sorted(mirror) == sorted(stored)
    for k, (b, t) in mirror.items():
        assert b == stored[k][0]
        assert t.cast(stored[k][1].schema).equals(stored[k][1]), k


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
@pytest.mark.parametrize("how", ["inner", "full_outer", "left_semi"])
def test_kept_chunks_equal_the_store_whenever_used(tmp_path, monkeypatch, state_store, how):
    used = []
    orig = J.StreamStreamJoinOp._take_mirrors

    def checked(self, stores):
        out = orig(self, stores)
        for store, sides in zip(stores, out):
            for side, mirror in sides.items():
                if mirror is not None:
                    _same(mirror, store, side)
                    used.append(side)
        return out
    monkeypatch.setattr(J.StreamStreamJoinOp, "_take_mirrors", checked)
    imps, clicks = scenario_sources(tmp_path)
    batches, _ = run(imps.join(clicks, COND, how).select("i.imp_id", "c.click_id") if how != "left_semi"
                     else imps.join(clicks, COND, how).select("imp_id"), tmp_path, state_store)
    if how == "inner":
        assert pairs(batches) == merge(INNER)
    elif how == "full_outer":
        assert pairs(batches) == merge(INNER, LEFT_NULLS, RIGHT_NULLS)
    assert len(used) >= 8, "batches 1-4 must use what the batch before kept (both sides)"


class _Store:
    def __init__(self, version, token):
        self.version, self.token = version, token


def test_kept_chunks_are_used_only_for_the_state_the_operator_committed():
    op = J.StreamStreamJoinOp.__new__(J.StreamStreamJoinOp)
    kept = {"left": {b"k": (0, pa.table({"x": [1]}))}, "right": {}}
    written = _Store(4, "t4")                    # batch 5 wrote to a store loaded at 4 ...
    op._keep_mirrors([written], [kept], 5)
    written.version, written.token = 5, "t5-mine"      # ... which then committed 5
    assert op._take_mirrors([_Store(5, "t5-mine")])[0] is kept
    assert op._take_mirrors([_Store(5, "t5-mine")])[0]["left"] is None, "taken: a failed batch keeps nothing"
    op._keep_mirrors([written], [kept], 6)       # (pretend batch 6 ran on it, and its commit failed)
    assert op._take_mirrors([_Store(5, "t5-mine")])[0]["left"] is None, "a redo of 6 from 5"
    op._keep_mirrors([_Store(4, "t4")], [kept], 5)     # batch 5 never committed by this store
    assert op._take_mirrors([_Store(5, "t5-other")])[0]["left"] is None, "another runner's version 5"
    w = _Store(4, "t4")
    op._keep_mirrors([w], [kept], 5)
    w.version, w.token = 5, "t5-mine"
    assert op._take_mirrors([_Store(5, "t5-other")])[0]["left"] is None, "same version, another token"

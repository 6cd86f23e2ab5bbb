"""The stream-stream join keeps the chunks it wrote decoded between batches (join.py, _take_mirrors)
instead of reading every chunk from the store per batch. What it keeps must be exactly what the
store holds whenever it is used, and nothing kept may be used for a store loaded at another state
(a redo of a batch, or a version another runner committed)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import increments as inc
from increments.operators import join as J
from increments.operators import join_state as js
from join_testutil import COND, INNER, LEFT_NULLS, RIGHT_NULLS, merge, pairs, run, scenario_sources, write_files


def _same(mirror: dict, store, side: str) -> None:
    stored = js.scan(store, side)
    assert sorted(mirror) == sorted(stored)
    for k, (b, t) in mirror.items():
        assert b == stored[k][0]
        assert t.cast(stored[k][1].schema).equals(stored[k][1]), k
        # the key hashes kept beside the rows (from the batch's key texts, computed in its key query)
        # are the hashes of the stored texts: a store read after a restart hashes those
        assert k in mirror.hashes, "every chunk this operator wrote keeps its key hashes"
        assert np.array_equal(mirror.hashes[k], js.key_hashes(stored[k][1].column("__k"))), k


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


# Composite keys (a string with a separator, NUL and non-ASCII characters; null parts never pair) over several
# batches, run once and run again in two parts (the second query reads the state from the store and
# hashes its stored key texts): the same rows pair, batch by batch.
_L = [[{"l": "l1", "s": "a\u001fb", "n": 1, "t": "2024-01-01T10:00:00Z"},
       {"l": "l2", "s": None, "n": 2, "t": "2024-01-01T10:00:00Z"},
       {"l": "l3", "s": "\u00e9\u20ac" * 9, "n": None, "t": "2024-01-01T10:01:00Z"}],
      [{"l": "l4", "s": "a", "n": 1, "t": "2024-01-01T10:02:00Z"},
       {"l": "l5", "s": "\u0000", "n": 5, "t": "2024-01-01T10:02:00Z"}],
      [{"l": "l6", "s": "a\u001fb", "n": 1, "t": "2024-01-01T10:03:00Z"}],
      [{"l": "l7", "s": "x" * 40, "n": 7, "t": "2024-01-01T10:04:00Z"}]]
_R = [[{"r": "r1", "s": "a", "n": 1, "t": "2024-01-01T10:00:30Z"}],
      [{"r": "r2", "s": "a\u001fb", "n": 1, "t": "2024-01-01T10:02:30Z"},
       {"r": "r3", "s": "\u00e9\u20ac" * 9, "n": None, "t": "2024-01-01T10:02:30Z"}],
      [{"r": "r4", "s": None, "n": 2, "t": "2024-01-01T10:03:30Z"},
       {"r": "r5", "s": "\u0000", "n": 5, "t": "2024-01-01T10:03:30Z"},
       {"r": "r6", "s": "a", "n": 1, "t": "2024-01-01T10:03:40Z"}],
      [{"r": "r7", "s": "x" * 40, "n": 7, "t": "2024-01-01T10:04:30Z"},
       {"r": "r8", "s": "a\u001fb", "n": 1, "t": "2024-01-01T10:04:40Z"}]]
_COND = ("r.s = l.s AND r.n = l.n AND r.t BETWEEN l.t - INTERVAL 1 HOUR AND l.t + INTERVAL 1 HOUR")


def _composite(tmp, files: int, chk: str, state_store: str) -> list[set]:
    got = []
    ldir = write_files(str(tmp / "l"), _L[:files])        # (rewrites the files before `files` unchanged)
    rdir = write_files(str(tmp / "r"), _R[:files])
    left = (inc.read_stream.files(ldir, "json", "l STRING, s STRING, n BIGINT, t TIMESTAMP", max_files_per_trigger=1)
            .with_watermark("t", "1 day").alias("l"))
    right = (inc.read_stream.files(rdir, "json", "r STRING, s STRING, n BIGINT, t TIMESTAMP", max_files_per_trigger=1)
             .with_watermark("t", "1 day").alias("r"))
    q = (left.join(right, _COND).select("l.l", "r.r").write_stream
         .foreach_batch(lambda t, b: got.append({(x["l"], x["r"]) for x in t.to_pylist()}))
         .checkpoint_location(chk).option("state_store", state_store).trigger(available_now=True).start())
    q.await_termination()
    assert q.exception() is None
    return got


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_composite_keys_pair_the_same_after_a_restart(tmp_path, state_store):
    whole = _composite(tmp_path / "a", 4, str(tmp_path / "chk_whole"), state_store)
    assert whole[:4] == [set(), {("l1", "r2"), ("l4", "r1")}, {("l5", "r5"), ("l4", "r6"), ("l6", "r2")},
                         {("l7", "r7"), ("l1", "r8"), ("l6", "r8")}]
    chk = str(tmp_path / "chk_parts")
    first = _composite(tmp_path / "b", 2, chk, state_store)
    second = _composite(tmp_path / "b", 4, chk, state_store)     # a new query: the state read from the store
    # (each run ends with a no-data batch: the watermark moved)
    assert [b for b in first + second if b] == [b for b in whole if b]

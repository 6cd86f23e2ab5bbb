"""A minimal sorted set of byte keys (a list of sorted chunks, as in sortedcontainers).

Insert/discard cost O(log n + chunk size); ``irange`` returns a materialised list so callers
may mutate the set while consuming the result.  Used by the in-memory store for its whole
key index and by the RocksDB store for the uncommitted overlay.

Bulk inserts (``add_many``) are kept aside unsorted until a read needs them in order: a batch that
inserts a million keys and never scans pays no sort at all; one that scans a bounded range a few
times filters the pending keys instead of sorting them all; anything else sorts them once and
merges them in.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from itertools import chain, filterfalse, islice
from operator import lt

import numpy as np

from increments.lazy import lazy_module

pa = lazy_module("pyarrow")

_LOAD = 512
_FILTERED_SCANS = 4          # bounded scans served by filtering the pending keys before they are sorted in
_SMALL_PENDING = 2048        # fewer pending keys than this are sorted in at the first read


#: from this many keys on, sorted_items tries numpy's sort (its fixed cost is more below)
_NUMPY_SORT_MIN = 50_000


def sorted_items(d: dict) -> tuple[list[bytes], list]:
    """The keys of ``d`` in byte order and their values (a commit's WriteBatch and changelog). Many
    keys of one width up to 8 bytes, or 9 with one first byte (an integer key: state.encoding's tag
    and 8 bytes), are ordered by numpy's sort of them as integers, and both lists are taken by that
    order: no value looked up by key again (a million random lookups cost more than the sort)."""
    n = len(d)
    if n >= _NUMPY_SORT_MIN:
        keys = list(d)
        order = _byte_order(keys)
        if order is not None:
            ks, vs = np.empty(n, object), np.empty(n, object)
            ks[:] = keys
            vs[:] = list(d.values())
            return ks[order].tolist(), vs[order].tolist()
    keys = sorted(d)
    return keys, list(map(d.__getitem__, keys))


def sorted_pairs(keys: list[bytes], values: list) -> tuple[list[bytes], list]:
    """``keys`` (distinct) in byte order and ``values`` in the same order (what ``sorted_items`` gives
    for ``dict(zip(keys, values))``, without building the dict): by numpy's sort for keys
    ``_byte_order`` takes, else as given when already sorted, else by Python's sort of the positions
    (adaptive: nearly sorted keys, e.g. an index by time, cost about one pass)."""
    n = len(keys)
    if n >= _NUMPY_SORT_MIN:
        order = _byte_order(keys)
        if order is not None:
            ks, vs = np.empty(n, object), np.empty(n, object)
            ks[:] = keys
            vs[:] = values
            return ks[order].tolist(), vs[order].tolist()
    if all(map(lt, keys, islice(keys, 1, None))):
        return list(keys), list(values)
    order = sorted(range(n), key=keys.__getitem__)
    return list(map(keys.__getitem__, order)), list(map(values.__getitem__, order))


def _byte_order(keys: list[bytes]) -> "np.ndarray | None":
    """The permutation that sorts ``keys`` (distinct) by bytes, when they are of one width w <= 8, or
    w = 9 with a common first byte; None otherwise."""
    n = len(keys)
    if not n or not 1 <= len(keys[0]) <= 9:          # not of one width up to 9 (asked without a conversion)
        return None
    arr = pa.array(keys, pa.binary())
    offs = np.frombuffer(arr.buffers()[1], np.int32, n + 1)
    w = int(offs[1] - offs[0])
    if not 1 <= w <= 9 or int(offs[-1] - offs[0]) != n * w or not (np.diff(offs) == w).all():
        return None
    mat = np.frombuffer(arr.buffers()[2], np.uint8, n * w, int(offs[0])).reshape(n, w)
    if w == 9:
        if not (mat[:, 0] == mat[0, 0]).all():
            return None
        mat, w = mat[:, 1:], 8
    be = np.zeros((n, 8), np.uint8)              # left-aligned, zero-padded: the big-endian integers
    be[:, :w] = mat                              # order as the bytes do (one width: no prefix ties)
    return np.argsort(be.view(">u8").reshape(n).astype(np.uint64), kind="stable")


def _in_range(start: bytes | None, end: bytes | None):
    """A C-level predicate for start <= k < end (no Python frame per key when one side is open)."""
    if start is None and end is None:
        return lambda k: True
    if start is None:
        return end.__gt__
    if end is None:
        return start.__le__
    return lambda k: start <= k < end


class SortedKeys:
    __slots__ = ("_lists", "_maxes", "_len", "_pending", "_chunks", "_scans")

    def __init__(self, sorted_keys: list[bytes] | None = None):
        self._lists: list[list[bytes]] = []
        self._maxes: list[bytes] = []
        self._len = 0
        self._pending: dict[bytes, None] = {}      # added, not yet sorted in (as a set) ...
        self._chunks: list[list[bytes]] = []       # ... and as the lists add_many was given
        self._scans = 0
        if sorted_keys:
            self._build(sorted_keys)

    def _build(self, sorted_keys: list[bytes]) -> None:
        if not sorted_keys:
            self._lists, self._maxes, self._len = [], [], 0
            return
        self._lists = [sorted_keys[i:i + _LOAD] for i in range(0, len(sorted_keys), _LOAD)]
        self._maxes = [lst[-1] for lst in self._lists]
        self._len = len(sorted_keys)

    def __len__(self) -> int:
        return self._len + len(self._pending) + sum(map(len, self._chunks))

    def add_many(self, keys: list[bytes]) -> None:
        """Insert the keys (distinct, none present yet)."""
        if keys:
            self._chunks.append(list(keys))

    def _waiting(self) -> dict[bytes, None]:
        """Every pending key, as one set (built when a single key must be found among them)."""
        if self._chunks:
            for c in self._chunks:
                self._pending.update(dict.fromkeys(c))
            self._chunks = []
        return self._pending

    def add(self, key: bytes) -> None:
        """Insert ``key`` (the caller guarantees it is not present)."""
        if self._pending or self._chunks:
            self._waiting()[key] = None
            return
        if not self._maxes:
            self._lists.append([key]); self._maxes.append(key); self._len = 1
            return
        i = bisect_left(self._maxes, key)
        if i == len(self._maxes):
            i -= 1
            self._lists[i].append(key)
            self._maxes[i] = key
        else:
            insort(self._lists[i], key)
        self._len += 1
        lst = self._lists[i]
        if len(lst) > 2 * _LOAD:
            half = lst[_LOAD:]
            del lst[_LOAD:]
            self._lists.insert(i + 1, half)
            self._maxes[i] = lst[-1]
            self._maxes.insert(i + 1, half[-1])

    def _settle(self) -> None:
        """Sort the pending keys in."""
        pending = list(chain(self._pending, *self._chunks))
        self._pending, self._chunks, self._scans = {}, [], 0
        if not pending:
            return
        if len(pending) * 32 < self._len:
            for k in pending:
                self.add(k)
            return
        new = sorted(pending)
        self._build(new if not self._len else list(heapq.merge(chain.from_iterable(self._lists), new)))

    def discard(self, key: bytes) -> None:
        if (self._pending or self._chunks) and key in self._waiting():
            del self._pending[key]
            return
        i = bisect_left(self._maxes, key)
        if i == len(self._maxes):
            return
        lst = self._lists[i]
        j = bisect_left(lst, key)
        if j < len(lst) and lst[j] == key:
            del lst[j]
            self._len -= 1
            if lst:
                self._maxes[i] = lst[-1]
            else:
                del self._lists[i]; del self._maxes[i]

    def discard_many(self, keys: list[bytes]) -> None:
        """``discard`` each key; a large share of the set at once is filtered out in one pass."""
        if len(keys) * 16 < len(self):
            for k in keys:
                self.discard(k)
            return
        drop = set(keys).__contains__
        if self._pending or self._chunks:        # kept as one chunk of the survivors (no set built)
            kept = list(filterfalse(drop, chain(self._pending, *self._chunks)))
            self._pending, self._chunks = {}, ([kept] if kept else [])
        if self._len:
            self._build(list(filterfalse(drop, chain.from_iterable(self._lists))))

    def irange(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        """Keys k with start <= k < end (None = unbounded), in order."""
        if self._pending or self._chunks:
            if (len(self) - self._len < _SMALL_PENDING or (start is None and end is None)
                    or self._scans >= _FILTERED_SCANS):
                self._settle()
            else:
                self._scans += 1
                sel = sorted(k for k in chain(self._pending, *self._chunks)
                             if (start is None or k >= start) and (end is None or k < end))
                base = self._irange(start, end)
                return list(heapq.merge(base, sel)) if base and sel else (base or sel)
        return self._irange(start, end)

    def pop_range(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        """Remove the keys k with start <= k < end and return them in order: pending keys are split by
        C-level filters (only those in the range get sorted), the sorted ones cut out as slices."""
        inside = None
        if self._pending or self._chunks:
            pend = list(chain(self._pending, *self._chunks))
            test = _in_range(start, end)
            inside = sorted(filter(test, pend))
            kept = pend
            if inside:
                kept = list(filterfalse(test, pend)) if len(inside) < len(pend) else []
                self._pending, self._chunks = {}, ([kept] if kept else [])
            self._scans += 1                # as irange: the survivors are sorted in after a few passes
            if len(kept) < _SMALL_PENDING or self._scans >= _FILTERED_SCANS:
                self._settle()
        out: list[bytes] = []
        i = 0 if start is None else bisect_left(self._maxes, start)
        while i < len(self._lists):
            lst = self._lists[i]
            n = len(lst)
            lo = 0 if start is None else bisect_left(lst, start)
            hi = n if end is None or lst[-1] < end else bisect_left(lst, end)
            if lo < hi:
                out.extend(lst[lo:hi])
                del lst[lo:hi]
                self._len -= hi - lo
            if hi < n:                     # the range ends inside this list (its last key stays)
                break
            if lst:
                self._maxes[i] = lst[-1]
                i += 1
            else:
                del self._lists[i], self._maxes[i]
        if inside:
            return list(heapq.merge(out, inside)) if out else inside
        return out

    def _irange(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        out: list[bytes] = []
        i = 0 if start is None else bisect_left(self._maxes, start)
        first = True
        while i < len(self._lists):
            lst = self._lists[i]
            lo = bisect_left(lst, start) if (first and start is not None) else 0
            first = False
            if end is not None and lst[-1] >= end:
                out.extend(lst[lo:bisect_left(lst, end)])
                break
            out.extend(lst[lo:] if lo else lst)
            i += 1
        return out

    def __iter__(self):
        self._settle()
        for lst in self._lists:
            yield from lst

"""A minimal sorted set of byte keys (a list of sorted chunks, as in sortedcontainers).

Insert/discard cost O(log n + chunk size); ``irange`` returns a materialised list so callers
may mutate the set while consuming the result.  Used by the in-memory store for its whole
key index and by the RocksDB store for the uncommitted overlay.
"""
from __future__ import annotations

from bisect import bisect_left, insort

_LOAD = 512


class SortedKeys:
    __slots__ = ("_lists", "_maxes", "_len")

    def __init__(self, sorted_keys: list[bytes] | None = None):
        self._lists: list[list[bytes]] = []
        self._maxes: list[bytes] = []
        self._len = 0
        if sorted_keys:
            self._lists = [sorted_keys[i:i + _LOAD] for i in range(0, len(sorted_keys), _LOAD)]
            self._maxes = [lst[-1] for lst in self._lists]
            self._len = len(sorted_keys)

    def __len__(self) -> int:
        return self._len

    def add(self, key: bytes) -> None:
        """Insert ``key`` (the caller guarantees it is not present)."""
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

    def discard(self, key: bytes) -> None:
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

    def irange(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        """Keys k with start <= k < end (None = unbounded), in order."""
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
        for lst in self._lists:
            yield from lst

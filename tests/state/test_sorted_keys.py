"""state.sortedkeys: pop_range against a model set, sorted_items against sorted()."""
import random

import numpy as np
import pytest

from state import sortedkeys
from state.sortedkeys import SortedKeys, sorted_items


def _key(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))


def test_pop_range_is_range_keys_then_discard():
    """Keys settled, pending (bulk-added) or both; bounded and open ranges; adds in between."""
    rng = random.Random(3)
    for trial in range(120):
        keys = list({_key(rng) for _ in range(rng.randrange(0, 4000))})
        rng.shuffle(keys)
        s = SortedKeys()
        cut = rng.randrange(len(keys) + 1)
        for k in keys[:cut]:
            s.add(k)
        s.add_many(keys[cut:])
        if rng.random() < 0.3:
            s.irange(None, None)
        model = set(keys)
        for _ in range(6):
            lo = _key(rng) if rng.random() < 0.7 else None
            hi = _key(rng) if rng.random() < 0.7 else None
            want = sorted(k for k in model if (lo is None or k >= lo) and (hi is None or k < hi))
            assert s.pop_range(lo, hi) == want, (trial, lo, hi)
            model -= set(want)
            more = list({bytes([rng.randrange(256)] * 4) + bytes([rng.randrange(256)])
                         for _ in range(rng.choice([20, 3000]))} - model)
            s.add_many(more)
            model |= set(more)
        assert s.irange(None, None) == sorted(model) and len(s) == len(model)


@pytest.mark.parametrize("make", [
    lambda r: r.integers(0, 256, (3000, 9)).astype(np.uint8).tobytes(),                 # 9 bytes, mixed first byte
    lambda r: np.hstack([np.full((3000, 1), 0x10, np.uint8), r.integers(0, 256, (3000, 8)).astype(np.uint8)]).tobytes(),
    lambda r: r.integers(0, 256, (3000, 3)).astype(np.uint8).tobytes(),
    lambda r: r.integers(0, 3, (3000, 8)).astype(np.uint8).tobytes(),                   # zero bytes, near ties
    None,                                                                                 # mixed widths
])
def test_sorted_items_is_sorted(monkeypatch, make):
    monkeypatch.setattr(sortedkeys, "_NUMPY_SORT_MIN", 0)
    rng = np.random.default_rng(5)
    if make is None:
        keys = list({rng.bytes(int(w)) for w in rng.integers(1, 12, 3000)})
    else:
        blob = make(rng)
        w = len(blob) // 3000
        keys = list(dict.fromkeys(blob[i:i + w] for i in range(0, len(blob), w)))
    d = {k: (None if i % 7 == 0 else b"v%d" % i) for i, k in enumerate(keys)}
    ks, vs = sorted_items(d)
    assert ks == sorted(d) and vs == [d[k] for k in ks]

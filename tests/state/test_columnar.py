"""state.columnar writes the bytes state.encoding writes, for whole Arrow columns: keys (every type
encode_key takes, nulls included, several columns joined) and values (pickles of tuples of integers,
floats and booleans, identical to encode_value); decode_values reads them and any other pickle back."""
import decimal
import math
import pickle
import random

import numpy as np
import pyarrow as pa
import pytest

from state.columnar import binary_array, encode_keys
from state.columnar_values import decode_values, encode_values
from state.encoding import decode_value, encode_key, encode_value

rng = random.Random(3)
N = 1500


def _ints(lo, hi):
    return [None if rng.random() < 0.1 else rng.randint(lo, hi) for _ in range(N)]


def _maybe(f):
    return [None if rng.random() < 0.1 else f() for _ in range(N)]


COLS = {
    "int64": pa.array(_ints(-2 ** 63, 2 ** 63 - 1), pa.int64()),
    "int64_small": pa.array(_ints(-70000, 70000), pa.int64()),
    "int32": pa.array(_ints(-2 ** 31, 2 ** 31 - 1), pa.int32()),
    "uint8": pa.array(_ints(0, 255), pa.uint8()),
    "float64": pa.array(_maybe(lambda: rng.choice([0.0, -0.0, math.nan, math.inf, -math.inf, rng.uniform(-1e10, 1e10)])),
                        pa.float64()),
    "float32": pa.array(_maybe(lambda: rng.uniform(-10, 10)), pa.float32()),
    "bool": pa.array(_maybe(lambda: rng.random() < 0.5), pa.bool_()),
    "string": pa.array(_maybe(lambda: "".join(rng.choice("ab\x00é\uffff") for _ in range(rng.randint(0, 5))))),
    "large_string": pa.array(_maybe(lambda: "x" * rng.randint(0, 3)), pa.large_string()),
    "binary": pa.array(_maybe(lambda: bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 4)))), pa.binary()),
    "timestamp_utc": pa.array(_ints(-2 ** 50, 2 ** 50), pa.timestamp("us", tz="UTC")),
    "timestamp_ms_naive": pa.array(_ints(-2 ** 40, 2 ** 40), pa.timestamp("ms")),
    "date": pa.array(_ints(-100000, 100000), pa.date32()),
    "decimal": pa.array(_maybe(lambda: decimal.Decimal(rng.randint(-10 ** 6, 10 ** 6)) / 100), pa.decimal128(10, 2)),
}


@pytest.mark.parametrize("name", list(COLS))
def test_one_key_column_is_encode_key(name):
    c = COLS[name]
    assert encode_keys([c]) == [encode_key((v,)) for v in c.to_pylist()]


def test_several_key_columns_are_encode_key_of_the_tuple():
    names = list(COLS)
    for _ in range(40):
        sel = rng.sample(names, rng.randint(2, 4))
        rows = zip(*(COLS[s].to_pylist() for s in sel))
        assert encode_keys([COLS[s] for s in sel]) == [encode_key(t) for t in rows], sel
    assert encode_keys([pa.chunked_array([COLS["int64"][:10], COLS["int64"][10:20]])]) == \
        [encode_key((v,)) for v in COLS["int64"][:20].to_pylist()]


VALUE_COLS = ["int64", "int64_small", "int32", "uint8", "float64", "float32", "bool"]


def test_values_are_encode_value_and_decode_back():
    for _ in range(60):
        sel = [rng.choice(VALUE_COLS) for _ in range(rng.randint(1, 5))]
        rows = list(zip(*(COLS[s].to_pylist() for s in sel)))
        expected = [encode_value(t) for t in rows]
        assert encode_values([COLS[s] for s in sel]) == expected, sel
        # absent values, and pickles another writer made (protocol 4: no layout of ours)
        stored = [None if rng.random() < 0.2 else (pickle.dumps(t, protocol=4) if rng.random() < 0.1 else e)
                  for t, e in zip(rows, expected)]
        cols, existed = decode_values(stored, [COLS[s].type for s in sel])
        assert existed.to_pylist() == [v is not None for v in stored]
        for i, v in enumerate(stored):
            want = (None,) * len(sel) if v is None else decode_value(v)
            got = tuple(c[i].as_py() for c in cols)
            assert all(a == b or (a is None and b is None) or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
                       for a, b in zip(got, want)), (sel, got, want)


def test_values_of_other_types_go_through_pickle():
    c = [COLS["string"], COLS["timestamp_utc"]]
    rows = list(zip(*(x.to_pylist() for x in c)))
    assert encode_values(c) == [encode_value(t) for t in rows]
    cols, _ = decode_values([encode_value(t) for t in rows], [x.type for x in c])
    assert [tuple(x[i].as_py() for x in cols) for i in range(len(rows))] == rows
    assert [a.as_py() for a in decode_values([None, None], [pa.int64()])[0][0]] == [None, None]


def test_binary_array_is_pa_array():
    items = [b"", b"a\x00", None, b"xyz" * 10, None]
    assert binary_array(items).equals(pa.array(items, pa.binary()))
    assert binary_array([b"k1", b"k2"]).equals(pa.array([b"k1", b"k2"], pa.binary()))
    assert binary_array(items * 200).equals(pa.array(items * 200, pa.binary()))     # beyond SMALL
    assert binary_array([b"ab"] * 1000).equals(pa.array([b"ab"] * 1000, pa.binary()))
    assert binary_array([None] * 1000).equals(pa.array([None] * 1000, pa.binary()))


@pytest.mark.parametrize("values", [[3, 7, 255], [300, 65535, 256], [-5, 70000, 2 ** 31 - 1],
                                    [1_700_000_000_000_000, 1_700_000_000_000_001, 2 ** 50],
                                    [-(2 ** 50), -(2 ** 49) - 7, -(2 ** 48)], [1.5, -0.0, 1e300]])
def test_values_of_one_layout_decode_by_columns(values):
    """A batch whose values all share one layout is read as column slices (its own path)."""
    t = pa.float64() if isinstance(values[0], float) else pa.int64()
    rows = [(v, True, v) for v in values * 200]
    stored = encode_values([pa.array([r[0] for r in rows], t), pa.array([True] * len(rows)),
                            pa.array([r[2] for r in rows], t)])
    assert stored == [encode_value(r) for r in rows]
    cols, existed = decode_values(stored, [t, pa.bool_(), t])
    assert [tuple(c[i].as_py() for c in cols) for i in range(len(rows))] == rows


@pytest.mark.parametrize("lo, hi", [(2 ** 31, 2 ** 32), (2 ** 31, 2 ** 40), (2 ** 47, 2 ** 48 - 1), (2 ** 47, 2 ** 48),
                                    (2 ** 55, 2 ** 63 - 1), (2 ** 63 - 1000, 2 ** 63 - 1)])
def test_large_positive_ints_as_pickle_writes_them(lo, hi):
    """Positive LONG1 values (times in microseconds): one length is written by column, mixed lengths
    by the general path; both as pickle writes them, with and without a second column."""
    rng = np.random.default_rng(lo % 1000)
    v = pa.array(np.concatenate([[lo, hi], rng.integers(lo, hi, 398, dtype=np.int64, endpoint=True)]))
    for cols in ([v], [v, pa.array(rng.integers(0, 300, 400))]):
        assert encode_values(cols) == [encode_value(t) for t in zip(*(c.to_pylist() for c in cols))]


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_values_of_one_width_per_element_as_pickle_writes_them(k):
    """Rows whose every element has one width (counts, times, floats, booleans without nulls: one
    layout, written column by column), with MARK beyond three elements; encode_value_array too."""
    from state.columnar_values import encode_value_array
    r = np.random.default_rng(k)
    kinds = [pa.array(r.integers(0, 256, 500)), pa.array(r.integers(2 ** 50, 2 ** 51, 500)),
             pa.array(r.normal(size=500)), pa.array(r.integers(0, 2, 500).astype(bool)), pa.array(r.integers(1, 9, 500))]
    cols = [kinds[(i * 3 + k) % len(kinds)] for i in range(k)]
    want = [encode_value(t) for t in zip(*(c.to_pylist() for c in cols))]
    assert encode_values(cols) == want
    assert encode_value_array(cols).to_pylist() == want
    with_null = [pa.array([None] + cols[0].to_pylist()[1:], cols[0].type)] + cols[1:]     # a null: another width
    assert encode_value_array(with_null).to_pylist() == [encode_value(t) for t in zip(*(c.to_pylist() for c in with_null))]

"""Properties of the state key codec (state/encoding.py, used through increments/operators/key_codec.py)
checked on generated values (hypothesis), beyond the hand-picked cases of test_encoding.py:

- byte order of encode_key equals the logical order of same-typed tuples, for scalars and for nested
  STRUCT (tuple/dict) and list keys, NULLs (None) first at every level, lists shorter-prefix first
  (the order eviction range deletes and prefix scans rely on);
- decode_key(encode_key(t)) gives t back (a struct as the tuple of its field values);
- encode_prefix(t[:k]) is a byte prefix of encode_key(t);
- key_codec.time_bound(W) is above exactly the keys whose leading time (us) is <= W (ms).
"""
from __future__ import annotations

import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from increments.operators.key_codec import time_bound
from state.encoding import decode_key, encode_key, encode_prefix

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
FLOATS = st.floats(allow_nan=False)
TEXT = st.text()                                   # any code points, NUL included
BYTES = st.binary()
TIMES = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
                     timezones=st.just(dt.timezone.utc))
SCALARS = [INT64, FLOATS, TEXT, BYTES, TIMES, st.booleans(), st.dates()]


def nullable(s):
    return st.none() | s


def order_key(v):
    """The logical order of a key value: None first, structs field by field, lists element by element."""
    if v is None:
        return (0,)
    if isinstance(v, dict):
        v = tuple(v.values())
    if isinstance(v, tuple):
        return (1, tuple(order_key(x) for x in v))
    if isinstance(v, list):
        return (1, [order_key(x) for x in v])
    if isinstance(v, float) and v == 0.0:
        return (1, 0.0)                             # -0.0 is 0.0
    return (1, v)


NESTED = {
    "struct": lambda s: st.tuples(nullable(s), nullable(s)),
    "list": lambda s: st.lists(nullable(s), max_size=4),
    "struct_of_list": lambda s: st.tuples(nullable(s), st.lists(nullable(s), max_size=3)),
    "list_of_struct": lambda s: st.lists(st.tuples(nullable(s), nullable(s)), max_size=3),
}


@st.composite
def same_typed_pair(draw):
    """Two key tuples (scalar, nested) whose elements have the same types position by position."""
    seed = draw(st.sampled_from(SCALARS))
    nested = NESTED[draw(st.sampled_from(sorted(NESTED)))](seed)
    return tuple((draw(nullable(seed)), draw(nullable(nested))) for _ in range(2))


def _cmp(x, y) -> int:
    return (x > y) - (x < y)


@settings(max_examples=150, deadline=None)
@given(same_typed_pair())
def test_byte_order_is_the_logical_order_of_scalar_and_nested_keys(pair):
    a, b = pair
    assert _cmp(encode_key(a), encode_key(b)) == _cmp(order_key(a), order_key(b)), (a, b)


@settings(max_examples=100, deadline=None)
@given(same_typed_pair())
def test_keys_round_trip_and_prefixes_are_byte_prefixes(pair):
    for t in pair:
        assert order_key(decode_key(encode_key(t))) == order_key(t)
        assert encode_key(t).startswith(encode_prefix(t[:1]))


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.sampled_from("abc"), nullable(INT64), min_size=1))
def test_a_dict_struct_is_its_field_values_in_order(fields):
    assert encode_key((fields,)) == encode_key((tuple(fields.values()),))
    assert decode_key(encode_key((fields,))) == (tuple(fields.values()),)


@settings(max_examples=100, deadline=None)
@given(st.integers(-(1 << 40), 1 << 40), st.integers(-(1 << 30), 1 << 30), nullable(TEXT))
def test_time_bound_is_above_exactly_the_keys_at_or_before_the_watermark(t_us, w_ms, rest):
    key = encode_key((t_us, rest))
    assert (key < time_bound(w_ms)) == (t_us <= w_ms * 1000)

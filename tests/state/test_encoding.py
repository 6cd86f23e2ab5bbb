import datetime as dt
import itertools
import math
import random

import pytest

from state.encoding import (decode_key, decode_value, encode_key, encode_prefix, encode_value,
                            prefix_end)

UTC = dt.timezone.utc
SAMPLES = {
    "int": [-(2**63), -(2**31), -1, 0, 1, 7, 255, 256, 2**40, 2**63 - 1],
    "float": [-math.inf, -1e300, -2.5, -1e-300, 0.0, 1e-300, 1.0, 2.5, 1e300, math.inf],
    "str": ["", "\x00", "\x00\x00", "a", "a\x00", "a\x00b", "ab", "b", "é", "\uffff", "日本"],
    "bytes": [b"", b"\x00", b"\x00\xff", b"\x01", b"a", b"a\x00", b"ab", b"\xff", b"\xff\xff"],
    "bool": [False, True],
    "ts": [dt.datetime(1900, 1, 1, tzinfo=UTC), dt.datetime(1970, 1, 1, tzinfo=UTC),
           dt.datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=UTC), dt.datetime(2099, 1, 1, tzinfo=UTC)],
    "naive": [dt.datetime(1969, 12, 31, 23, 59, 59), dt.datetime(2024, 1, 1)],
    "date": [dt.date(1900, 1, 1), dt.date(2024, 2, 29)],
}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_single_values_order_and_roundtrip(kind):
    values = SAMPLES[kind] + [None]
    for a, b in itertools.product(values, repeat=2):
        ka, kb = encode_key((a,)), encode_key((b,))
        assert decode_key(ka) == (a,)
        if a is None or b is None:
            expected = (a is not None, 0) < (b is not None, 0) if a is not b else False
            assert (ka < kb) == expected
        else:
            assert (ka < kb) == (a < b), (a, b)
            assert (ka == kb) == (a == b)


def test_tuples_order_matches_python_order():
    rng = random.Random(1)
    rows = [(rng.choice(SAMPLES["ts"]), rng.choice(SAMPLES["str"]), rng.choice(SAMPLES["int"]))
            for _ in range(500)]
    assert sorted(rows) == [decode_key(k) for k in sorted(encode_key(r) for r in rows)]


def test_tz_aware_datetime_normalised_to_utc():
    cet = dt.timezone(dt.timedelta(hours=1))
    a = dt.datetime(2024, 1, 1, 13, 0, tzinfo=cet)
    assert encode_key((a,)) == encode_key((dt.datetime(2024, 1, 1, 12, 0, tzinfo=UTC),))
    assert decode_key(encode_key((a,)))[0].tzinfo == UTC


def test_float_specials():
    assert encode_key((-0.0,)) == encode_key((0.0,))
    assert encode_key((math.inf,)) < encode_key((math.nan,))
    assert math.isnan(decode_key(encode_key((math.nan,)))[0])


def test_prefix_and_window_ranges():
    t0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
    keys = [encode_key((t0 + dt.timedelta(minutes=m), g)) for m in range(5) for g in ["a", "ab", "b"]]
    p = encode_prefix((t0 + dt.timedelta(minutes=2),))
    assert [decode_key(k)[1] for k in keys if k.startswith(p)] == ["a", "ab", "b"]
    # a window range on the leading event-time element
    lo, hi = encode_key((t0 + dt.timedelta(minutes=1),)), encode_key((t0 + dt.timedelta(minutes=3),))
    assert len([k for k in keys if lo <= k < hi]) == 6
    # prefix on string: "a" prefix must not match "ab"
    pa_ = encode_prefix((t0, "a"))
    assert [decode_key(k) for k in keys if k.startswith(pa_)] == [(t0, "a")]
    assert prefix_end(b"ab\xff") == b"ac" and prefix_end(b"\xff") is None
    end = prefix_end(p)
    assert all((k.startswith(p)) == (p <= k < end) for k in keys)


def test_errors():
    with pytest.raises(OverflowError):
        encode_key((2**63,))
    with pytest.raises(TypeError):
        encode_key((object(),))
    with pytest.raises(ValueError):
        decode_key(b"\x99")


def test_value_codec_roundtrip():
    v = (1, "x", None, 2.5, [1, 2], {"a": b"b"}, dt.datetime(2024, 1, 1, tzinfo=UTC))
    assert decode_value(encode_value(v)) == v


def test_decimal_keys_order_and_keep_their_scale():
    """A decimal grouping key (Arrow decimal128: one scale per column) orders by value within
    its scale and comes back with that scale (Decimal('1.50'), not Decimal('1.5'))."""
    from decimal import Decimal as D
    vals = [D("-99999999.99"), D("-12.50"), D("-0.01"), D("0.00"), D("0.01"), D("1.25"),
            D("99999999.99")]
    keys = [encode_key((v, "x")) for v in vals]
    assert keys == sorted(keys)
    assert [str(decode_key(k)[0]) for k in keys] == [str(v) for v in vals]
    big = D("9" * 38)
    assert decode_key(encode_key((big,)))[0] == big
    with pytest.raises(OverflowError, match="38-digit"):
        encode_key((D("9" * 39),))
    with pytest.raises(TypeError, match="not finite"):
        encode_key((D("NaN"),))


def test_nested_keys_order_as_spark_and_round_trip():
    """STRUCT keys (dicts / tuples) compare field by field, lists element by element with a shorter
    prefix first; a NULL struct sorts first and differs from a struct of NULLs."""
    from state.encoding import decode_key, encode_key
    lists = [None, [], [None], ["a"], ["a", None], ["a", "b"], ["b"]]
    for a, b in zip(lists, lists[1:]):
        assert encode_key((a,)) < encode_key((b,))
    structs = [None, (None, None), (None, 1), (1, None), (1, 2), (2, 0)]
    for a, b in zip(structs, structs[1:]):
        assert encode_key((a,)) < encode_key((b,))
    assert encode_key(({"x": 1, "y": [1, 2]}, "k")) == encode_key(((1, [1, 2]), "k"))
    for v in lists + structs + [((1, ["x"]), [(2, None)])]:
        assert decode_key(encode_key((v, 7))) == (v, 7)

"""Order-preserving key encoding and a compact value codec.

Contract
--------
``encode_key(t)`` maps a tuple of Python values to bytes such that for two tuples whose
elements have the same types position by position, ``encode_key(a) < encode_key(b)``
(bytewise) exactly when ``a < b`` (Python tuple order).  ``None`` sorts before every other
value.  Values of different types never interleave: they are ordered by a type tag.

Each element's encoding is self-delimiting and prefix-free, so the encoding of a tuple is
the concatenation of its elements' encodings.  Consequently ``encode_prefix(t[:k])`` is a
byte prefix of ``encode_key(t)`` and a prefix scan over ``encode_prefix((a,))`` returns
exactly the keys whose first element is ``a``; a range ``[encode_key((lo,)),
encode_key((hi,)))`` returns exactly the keys whose first element ``e`` has ``lo <= e < hi``
(this is how an event-time prefix becomes a window range and eviction a range delete).

Supported element types: None, bool, int (signed 64-bit), float, str, bytes,
datetime (tz-aware: converted to UTC microseconds; naive: kept naive), date, and
decimal.Decimal up to 38 digits (Arrow's decimal128: the unscaled integer, then the scale;
ordered within one scale, which is what one column's values share; a Decimal comes back
with the scale it went in with).
Floats: -0.0 is normalised to 0.0; NaN sorts above +inf.
Nested values (a STRUCT or list key column): a dict or tuple (a struct: its field values in order)
and a list encode as a tag, then each element prefixed by 0x01, then 0x00: structs compare field
by field, lists element by element with a shorter prefix first (Spark's ordering); None (a NULL
struct) sorts before any struct, also one of NULL fields. A struct decodes to a tuple of its field
values (pyarrow builds a struct array from tuples), a list to a list.

Values are encoded with pickle protocol 5 (``encode_value``/``decode_value``): any
picklable tuple round-trips; no ordering is implied.
"""
from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import pickle
import struct

__all__ = ["encode_key", "decode_key", "encode_prefix", "prefix_end",
           "encode_value", "decode_value"]

T_NONE, T_FALSE, T_TRUE, T_INT, T_FLOAT, T_DEC, T_STR, T_BYTES, T_TS, T_TS_NAIVE, T_DATE = (
    0x01, 0x02, 0x03, 0x10, 0x11, 0x12, 0x20, 0x21, 0x30, 0x31, 0x32)
T_STRUCT, T_LIST = 0x40, 0x41

_Q = struct.Struct(">Q")
_SIGN = 1 << 63
_MASK = (1 << 64) - 1
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_EPOCH_DATE = _dt.date(1970, 1, 1)
_US = _dt.timedelta(microseconds=1)


def _int64(v: int) -> bytes:
    if not -_SIGN <= v < _SIGN:
        raise OverflowError(f"integer {v} does not fit in a signed 64-bit key")
    return _Q.pack(v + _SIGN)


_SIGN128 = 1 << 127


def _decimal128(v: _decimal.Decimal) -> bytes:
    if not v.is_finite():
        raise TypeError(f"cannot encode Decimal value {v!r} in a state key (not finite)")
    sign, digits, exp = v.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0")
    if exp > 0:                      # Decimal('1E+2'): scale 0
        unscaled, exp = unscaled * 10 ** exp, 0
    if sign:
        unscaled = -unscaled
    if not -_SIGN128 < unscaled < _SIGN128 or -exp > 255:
        raise OverflowError(f"Decimal {v} does not fit in a 38-digit (decimal128) state key")
    return (unscaled + _SIGN128).to_bytes(16, "big") + bytes((-exp,))


def _escape(b: bytes) -> bytes:
    # 0x00 -> 0x00 0xFF, terminated by 0x00 0x00: terminator sorts below any continuation.
    return b.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def _micros(d: _dt.datetime, epoch: _dt.datetime) -> int:
    delta = d - epoch
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _encode_one(v, out: list) -> None:
    if v is None:
        out.append(b"\x01")
    elif v is True:
        out.append(b"\x03")
    elif v is False:
        out.append(b"\x02")
    elif isinstance(v, int):
        out.append(b"\x10" + _int64(v))
    elif isinstance(v, float):
        if v == 0.0:
            v = 0.0
        (bits,) = _Q.unpack(struct.pack(">d", v))
        bits = (bits ^ _MASK) if bits & _SIGN else (bits | _SIGN)
        out.append(b"\x11" + _Q.pack(bits))
    elif isinstance(v, _decimal.Decimal):
        out.append(b"\x12" + _decimal128(v))
    elif isinstance(v, str):
        out.append(b"\x20" + _escape(v.encode("utf-8")))
    elif isinstance(v, (bytes, bytearray, memoryview)):
        out.append(b"\x21" + _escape(bytes(v)))
    elif isinstance(v, _dt.datetime):
        if v.tzinfo is None:
            out.append(b"\x31" + _int64(_micros(v, _EPOCH_NAIVE)))
        else:
            out.append(b"\x30" + _int64(_micros(v, _EPOCH)))
    elif isinstance(v, _dt.date):
        out.append(b"\x32" + _int64((v - _EPOCH_DATE).days))
    elif isinstance(v, (dict, tuple, list)):
        out.append(b"\x41" if isinstance(v, list) else b"\x40")
        for x in (v.values() if isinstance(v, dict) else v):
            out.append(b"\x01")
            _encode_one(x, out)
        out.append(b"\x00")
    else:
        raise TypeError(f"cannot encode {type(v).__name__} value {v!r} in a state key")


def encode_key(values: tuple) -> bytes:
    """Encode a tuple so that byte order equals logical tuple order."""
    out: list[bytes] = []
    for v in values:
        _encode_one(v, out)
    return b"".join(out)


def encode_prefix(values: tuple) -> bytes:
    """Byte prefix shared by every key whose leading elements equal ``values``."""
    return encode_key(values)


def prefix_end(prefix: bytes) -> bytes | None:
    """Smallest byte string greater than every string starting with ``prefix``
    (None when there is none, i.e. the prefix is all 0xFF or empty): use as a scan end."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


def _unescape(b: bytes, i: int) -> tuple[bytes, int]:
    parts = []
    while True:
        j = b.index(b"\x00", i)
        parts.append(b[i:j])
        if b[j + 1] == 0x00:
            return b"".join(parts), j + 2
        parts.append(b"\x00")
        i = j + 2


def _read_int64(b: bytes, i: int) -> int:
    return _Q.unpack_from(b, i)[0] - _SIGN


def decode_key(b: bytes) -> tuple:
    """Inverse of :func:`encode_key` (tz-aware datetimes come back in UTC)."""
    out = []
    i, n = 0, len(b)
    while i < n:
        v, i = _decode_one(b, i)
        out.append(v)
    return tuple(out)


def _decode_one(b: bytes, i: int):
    t = b[i]
    i += 1
    if t == T_NONE:
        return None, i
    if t == T_FALSE:
        return False, i
    if t == T_TRUE:
        return True, i
    if t == T_INT:
        return _read_int64(b, i), i + 8
    if t == T_FLOAT:
        (bits,) = _Q.unpack_from(b, i)
        bits = (bits ^ _SIGN) if bits & _SIGN else (bits ^ _MASK)
        return struct.unpack(">d", _Q.pack(bits))[0], i + 8
    if t == T_DEC:
        unscaled = int.from_bytes(b[i:i + 16], "big") - _SIGN128
        return _decimal.Decimal(f"{unscaled}E-{b[i + 16]}"), i + 17  # exact (no context rounding)
    if t == T_STR:
        raw, i = _unescape(b, i)
        return raw.decode("utf-8"), i
    if t == T_BYTES:
        return _unescape(b, i)
    if t == T_TS:
        return _EPOCH + _read_int64(b, i) * _US, i + 8
    if t == T_TS_NAIVE:
        return _EPOCH_NAIVE + _read_int64(b, i) * _US, i + 8
    if t == T_DATE:
        return _EPOCH_DATE + _dt.timedelta(days=_read_int64(b, i)), i + 8
    if t in (T_STRUCT, T_LIST):
        items = []
        while b[i] == 0x01:
            v, i = _decode_one(b, i + 1)
            items.append(v)
        if b[i] != 0x00:
            raise ValueError(f"corrupt state key: byte 0x{b[i]:02x} at {i} inside a nested value")
        return (items if t == T_LIST else tuple(items)), i + 1
    raise ValueError(f"corrupt state key: unknown type tag 0x{t:02x} at byte {i - 1}")


def encode_value(values: tuple) -> bytes:
    """Compact value encoding (pickle protocol 5); no ordering guarantee."""
    return pickle.dumps(values, protocol=5)


def decode_value(b: bytes) -> tuple:
    return pickle.loads(b)

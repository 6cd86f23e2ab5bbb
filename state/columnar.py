"""State keys and values for whole Arrow columns at once: the same bytes as state.encoding, without
a Python call per row.

Contract (tested against state.encoding over generated data, tests/state/test_columnar.py):
* ``encode_keys(columns)[i] == encode_key(tuple(c[i] for c in columns))`` (as Python values, i.e.
  ``to_pylist()``) for every row i; columns of a type this module does not encode itself go through
  state.encoding element by element, so every type encode_key takes is accepted here too.
* ``encode_values(columns)[i] == encode_value(tuple(c[i] for c in columns))``: byte for byte what
  ``pickle.dumps(..., protocol=5)`` writes, so a store holds the same bytes whichever path wrote them
  (checkpoints of earlier releases and later ones read alike). Rows whose values this module does not
  lay out itself (an integer outside 32 bits, a string, a timestamp...) are pickled by state.encoding.
* ``decode_values(values, types)``: column j of ``decode_value(v)`` for every v (None stays a null
  row), as Arrow arrays of ``types``; pickles of the layouts encode_values writes are parsed with numpy,
  any other is unpickled by state.encoding.

``binary_array`` / ``binary_pylist`` move between Python lists of bytes and Arrow binary arrays
faster than ``pa.array`` / ``to_pylist`` (one join and one length pass).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from increments.lazy import lazy_module

from .encoding import _encode_one, decode_value, encode_key, encode_value

pa = lazy_module("pyarrow")
pc = lazy_module("pyarrow.compute")

_NULL_KEY = b"\x01"
#: below this many rows the functions go row by row through state.encoding (numpy's and Arrow's fixed
#: cost per call is larger than a few hundred rows' Python)
SMALL = 256


# -- Python lists <-> Arrow binary -------------------------------------------------------------------
def binary_array(items: Sequence[bytes | None]) -> "pa.Array":
    """``pa.array(items, pa.binary())`` (large_binary beyond 2 GiB), built from one join."""
    n = len(items)
    if n < SMALL:
        return pa.array(items, pa.binary())
    valid = None
    try:
        lens = np.fromiter(map(len, items), np.int64, n)
    except TypeError:                                          # None among them
        if items.count(None) == n:                             # every one (a changelog of deletes)
            return pa.nulls(n, pa.binary())
        mask = np.fromiter((x is not None for x in items), np.bool_, n)
        items = [b"" if x is None else x for x in items]
        valid = pa.py_buffer(np.packbits(mask, bitorder="little"))
        lens = np.fromiter(map(len, items), np.int64, n)
    offs = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    data = pa.py_buffer(b"".join(items))
    if offs[-1] < 2 ** 31 - 1:
        return pa.Array.from_buffers(pa.binary(), n, [valid, pa.py_buffer(offs.astype(np.int32)), data])
    return pa.Array.from_buffers(pa.large_binary(), n, [valid, pa.py_buffer(offs), data])


def _pieces(width: np.ndarray, seg: np.ndarray, pre: bytes = b"", post: bytes = b"") -> "pa.Array":
    """A binary array whose row i is ``pre + seg[i, :width[i]] + post``."""
    n = len(width)
    w = np.asarray(width, np.int64)[:, None]
    pieces = ([np.broadcast_to(np.frombuffer(pre, np.uint8), (n, len(pre)))] if pre else []) + [seg] + (
        [np.broadcast_to(np.frombuffer(post, np.uint8), (n, len(post)))] if post else [])
    widths = ([np.full((n, 1), len(pre))] if pre else []) + [w] + ([np.full((n, 1), len(post))] if post else [])
    return _compress(pieces, widths)


def _compress(pieces: list[np.ndarray], widths: list[np.ndarray]) -> "pa.Array":
    """A binary array whose row i is the concatenation over j of ``pieces[j][i, :widths[j][i]]``
    (each piece an (n, max width) uint8 matrix, each width an (n, 1) integer column)."""
    n = pieces[0].shape[0]
    if all(w.shape[0] == 0 or (w.min() == w.max() == p.shape[1]) for p, w in zip(pieces, widths)):
        row = sum(p.shape[1] for p in pieces)                  # every row is every piece whole
        return _from_offsets(np.arange(0, row * n + 1, row, dtype=np.int64),
                             np.concatenate(pieces, axis=1).reshape(-1))
    cut = [int(w.max()) for w in widths]                       # drop columns no row uses
    pieces = [p[:, :c] for p, c in zip(pieces, cut)]
    mat = np.concatenate(pieces, axis=1)
    mask = np.concatenate([np.arange(p.shape[1]) < w for p, w in zip(pieces, widths)], axis=1)
    total = sum(np.minimum(w[:, 0], p.shape[1]) for p, w in zip(pieces, widths))
    offs = np.zeros(n + 1, np.int64)
    np.cumsum(total, out=offs[1:])
    return _from_offsets(offs, mat[mask])


def _from_offsets(offs: np.ndarray, data: np.ndarray) -> "pa.Array":
    if offs[-1] < 2 ** 31 - 1:
        return pa.Array.from_buffers(pa.binary(), len(offs) - 1, [None, pa.py_buffer(offs.astype(np.int32)),
                                                                  pa.py_buffer(data)])
    return pa.Array.from_buffers(pa.large_binary(), len(offs) - 1, [None, pa.py_buffer(offs), pa.py_buffer(data)])


def _plain(arr) -> "pa.Array":
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


def _valid(arr) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), np.bool_)
    return pc.is_valid(arr).to_numpy(zero_copy_only=False)


# -- keys ------------------------------------------------------------------------------------------------
def _key_int64(tag: int, v: np.ndarray, valid: np.ndarray) -> "pa.Array":
    n = len(v)
    seg = np.empty((n, 9), np.uint8)
    seg[:, 0] = tag
    seg[:, 1:] = (v.astype(np.int64).view(np.uint64) ^ np.uint64(1 << 63)).astype(">u8").view(np.uint8).reshape(n, 8)
    if valid.all():
        return _from_offsets(np.arange(0, 9 * n + 1, 9, dtype=np.int64), seg.reshape(-1))
    seg[~valid, 0] = 0x01
    return _pieces(np.where(valid, 9, 1), seg)


def _ints(arr) -> np.ndarray:
    return pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)


def _key_column(arr) -> "pa.Array":
    """Each element's encode_key encoding (a binary array without nulls)."""
    t = arr.type
    n = len(arr)
    valid = _valid(arr)
    if pa.types.is_integer(t) and not (pa.types.is_uint64(t) and len(arr) and (pc.max(arr).as_py() or 0) >= 2 ** 63):
        return _key_int64(0x10, _ints(arr.cast(pa.int64())), valid)
    if pa.types.is_boolean(t):
        b = pc.fill_null(arr, False).to_numpy(zero_copy_only=False)
        return _pieces(np.ones(n, np.int64), np.where(valid, np.where(b, 0x03, 0x02), 0x01).astype(np.uint8)[:, None])
    if pa.types.is_floating(t) and not pa.types.is_float16(t):
        x = pc.fill_null(arr.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        x = np.where(x == 0.0, 0.0, x)                       # -0.0 -> 0.0 (NaN stays NaN, bits kept)
        bits = x.view(np.uint64)
        neg = (bits & np.uint64(1 << 63)) != 0
        bits = np.where(neg, bits ^ np.uint64((1 << 64) - 1), bits | np.uint64(1 << 63))
        seg = np.empty((n, 9), np.uint8)
        seg[:, 0] = 0x11
        seg[:, 1:] = bits.astype(">u8").view(np.uint8).reshape(n, 8)
        seg[~valid, 0] = 0x01
        return _pieces(np.where(valid, 9, 1), seg)
    if pa.types.is_timestamp(t) and t.unit in ("s", "ms", "us"):
        us = _ints(arr.cast(pa.int64())) * {"s": 1_000_000, "ms": 1000, "us": 1}[t.unit]
        return _key_int64(0x30 if t.tz is not None else 0x31, us, valid)
    if pa.types.is_date32(t):
        return _key_int64(0x32, _ints(arr.cast(pa.int32()).cast(pa.int64())), valid)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        tag = b"\x20" if (pa.types.is_string(t) or pa.types.is_large_string(t)) else b"\x21"
        b = arr.cast(pa.large_binary() if (pa.types.is_large_string(t) or pa.types.is_large_binary(t)) else pa.binary())
        esc = pc.replace_substring(b, b"\x00", b"\x00\xff")
        out = pc.binary_join_element_wise(pa.scalar(tag, esc.type), esc, pa.scalar(b"\x00\x00", esc.type),
                                          pa.scalar(b"", esc.type))
        if not valid.all():
            out = pc.if_else(pa.array(valid), out, pa.scalar(_NULL_KEY, out.type))
        return out
    enc = []
    for v in arr.to_pylist():                               # any other type: state.encoding, element by element
        parts: list[bytes] = []
        _encode_one(v, parts)
        enc.append(b"".join(parts))
    return binary_array(enc)


def encode_key_array(columns: Sequence) -> "pa.Array":
    """The keys of the rows of ``columns`` (Arrow arrays of one length) as a binary array."""
    cols = [_key_column(_plain(c)) for c in columns]
    if len(cols) == 1:
        return cols[0]
    if len({c.type for c in cols}) > 1:
        cols = [c.cast(pa.large_binary()) for c in cols]
    return pc.binary_join_element_wise(*cols, pa.scalar(b"", cols[0].type))


def encode_keys(columns: Sequence) -> list[bytes]:
    """``[encode_key(row) for row in rows of columns]`` (see the module doc)."""
    if not columns:
        return []
    if len(columns[0]) < SMALL:                  # a few rows: state.encoding row by row is quicker
        return [encode_key(t) for t in zip(*(_plain(c).to_pylist() for c in columns))]
    return encode_key_array(columns).to_pylist()


# -- values (pickle protocol 5 of a tuple) ------------------------------------------------------------
_TUPLE_OP = {1: 0x85, 2: 0x86, 3: 0x87}
_J_MIN, _J_MAX = -(2 ** 31), 2 ** 31


def _value_kind(t) -> str | None:
    if pa.types.is_integer(t) and not pa.types.is_uint64(t):
        return "int"
    if pa.types.is_floating(t) and not pa.types.is_float16(t):
        return "float"
    if pa.types.is_boolean(t):
        return "bool"
    return None


def _long1_bytes(v: np.ndarray) -> np.ndarray:
    """The byte count pickle's LONG1 gives each int64 (as its encode_long: bit_length // 8 + 1 bytes,
    one less for a negative value whose top byte is 0xff over a byte with its high bit set)."""
    u = np.abs(v).view(np.uint64)                         # |-2**63| stays 2**63 as uint64
    m = np.ones(len(v), np.int64)
    for j in range(1, 9):
        m += u >= np.uint64(1 << (8 * j - 1))
    le = np.zeros((len(v), 9), np.uint8)
    le[:, :8] = v.astype("<i8").view(np.uint8).reshape(-1, 8)
    le[:, 8] = np.where(v < 0, 0xFF, 0)
    rows = np.arange(len(v))
    top, below = le[rows, np.minimum(m - 1, 8)], le[rows, np.maximum(m - 2, 0)]
    return m - ((v < 0) & (m > 1) & (top == 0xFF) & ((below & 0x80) != 0))


def encode_values(columns: Sequence) -> list[bytes]:
    """``[encode_value(row) for row in rows of columns]`` (see the module doc)."""
    cols = [_plain(c) for c in columns]
    n = len(cols[0]) if cols else 0
    if not cols or n == 0:
        return [encode_value(()) for _ in range(n)]
    kinds = [_value_kind(c.type) for c in cols]
    if None in kinds or n < SMALL:
        return [encode_value(row) for row in zip(*(c.to_pylist() for c in cols))]
    k = len(cols)
    widths, segs = [], []
    for c, kind in zip(cols, kinds):
        valid = _valid(c)
        seg = np.zeros((n, 10), np.uint8)
        if kind == "int":
            v = _ints(c.cast(pa.int64()))
            long = (v < _J_MIN) | (v >= _J_MAX)
            w = np.where(v < 0, 5, np.where(v < 256, 2, np.where(v < 65536, 3, 5)))
            seg[:, 0] = np.where(v < 0, ord("J"), np.where(v < 256, ord("K"), np.where(v < 65536, ord("M"), ord("J"))))
            seg[:, 1:5] = v.astype(np.int32).view(np.uint8).reshape(n, 4)
            if long.any():                 # LONG1: length byte, then the fewest two's complement bytes
                m = _long1_bytes(v)
                w = np.where(long, 2 + m, w)
                seg[long, 0] = 0x8A
                seg[long, 1] = m[long]
                seg[long, 2:10] = v[long].astype("<i8").view(np.uint8).reshape(-1, 8)
        elif kind == "float":
            x = pc.fill_null(c.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
            w = np.full(n, 9)
            seg[:, 0] = ord("G")
            seg[:, 1:9] = x.astype(">f8").view(np.uint8).reshape(n, 8)
        else:
            b = pc.fill_null(c, False).to_numpy(zero_copy_only=False)
            w = np.ones(n, np.int64)
            seg[:, 0] = np.where(b, 0x88, 0x89)
        seg[~valid, 0] = ord("N")
        w = np.where(valid, w, 1)
        widths.append(w)
        segs.append(seg[:, :int(w.max())])
    body = sum(widths) + (1 if k > 3 else 0) + 3              # elements, MARK, tuple op, MEMOIZE, STOP
    head = np.empty((n, 11), np.uint8)
    head[:, :3] = (0x80, 0x05, 0x95)                          # PROTO 5, FRAME <8-byte length>
    head[:, 3:] = body.astype("<u8").view(np.uint8).reshape(n, 8)
    tail = np.empty((n, 3), np.uint8)
    tail[:] = (_TUPLE_OP.get(k, ord("t")), 0x94, ord("."))
    mark = [np.full((n, 1), ord("("), np.uint8)] if k > 3 else []
    pieces = [head] + mark + segs + [tail]
    wcols = ([np.full((n, 1), 11)] + [np.ones((n, 1), np.int64)] * len(mark)
             + [w[:, None] for w in widths] + [np.full((n, 1), 3)])
    return _compress(pieces, wcols).to_pylist()


def decode_values(values: Sequence[bytes | None], types: Sequence) -> tuple[list["pa.Array"], "pa.Array"]:
    """(columns, existed): column j of every decoded tuple as an Arrow array of ``types[j]`` (null where
    the value is None or its element is None), and whether each value was not None."""
    n = len(values)
    k = len(types)
    if values.count(None) == n:                  # every group new (a first batch): nothing to decode
        return [pa.nulls(n, t) for t in types], pa.array(np.zeros(n, np.bool_))
    if n < SMALL:
        existed = np.fromiter((v is not None for v in values), np.bool_, n)
        return _decode_slow(values, types, existed), pa.array(existed)
    arr = binary_array(values)
    existed = _valid(arr)
    kinds = [_value_kind(t) for t in types]
    if not existed.any():
        return [pa.nulls(n, t) for t in types], pa.array(existed)
    if None in kinds:
        return _decode_slow(values, types, existed), pa.array(existed)
    offs = np.frombuffer(arr.buffers()[1], np.int32 if arr.type == pa.binary() else np.int64, n + 1)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    if existed.all():
        uniform = _decode_uniform(data, offs, kinds, types)
        if uniform is not None:
            return uniform, pa.array(existed)
    data = np.concatenate([data, np.zeros(16, np.uint8)])      # reads past a short row stay in bounds
    last = len(data) - 1
    start, end = offs[:-1].astype(np.int64), offs[1:].astype(np.int64)

    def at(pos, j=0):
        return data[np.minimum(pos + j, last)]

    ok = existed & (end - start >= 14) & (at(start) == 0x80) & (at(start, 1) == 0x05) & (at(start, 2) == 0x95)
    body = np.zeros(n, np.int64)
    for j in range(8):
        body |= at(start, 3 + j).astype(np.int64) << (8 * j)
    ok &= body == end - start - 11
    pos = start + 11
    if k > 3:
        ok &= at(pos) == ord("(")
        pos = pos + 1
    cols_np, valids = [], []
    for kind in kinds:
        op = at(pos)
        isnull = op == ord("N")
        if kind == "int":
            b = [at(pos, 1 + j).astype(np.int64) for j in range(4)]
            v32 = (b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24)).astype(np.uint32).view(np.int32).astype(np.int64)
            v = np.where(op == ord("K"), b[0], np.where(op == ord("M"), b[0] | (b[1] << 8), v32))
            w = np.where(op == ord("K"), 2, np.where(op == ord("M"), 3, np.where(op == ord("J"), 5, 1)))
            long = op == 0x8A
            if long.any():                  # LONG1 of at most 8 bytes: little-endian, sign-extended
                m = at(pos, 1).astype(np.int64)
                raw = np.stack([np.where(j < m, at(pos, 2 + j), 0) for j in range(8)], axis=1).astype(np.uint8)
                neg = (raw[np.arange(n), np.clip(m - 1, 0, 7)] & 0x80) != 0
                for j in range(8):
                    raw[:, j] = np.where(neg & (j >= m), 0xFF, raw[:, j])
                v = np.where(long, raw.view("<i8").reshape(n), v)
                w = np.where(long, 2 + m, w)
                long &= (m >= 1) & (m <= 8)
            ok &= isnull | (op == ord("K")) | (op == ord("M")) | (op == ord("J")) | long
        elif kind == "float":
            raw = np.stack([at(pos, 1 + j) for j in range(8)], axis=1)
            v = raw.copy().view(">f8").reshape(n).astype(np.float64)
            w = np.where(op == ord("G"), 9, 1)
            ok &= isnull | (op == ord("G"))
        else:
            v = op == 0x88
            w = np.ones(n, np.int64)
            ok &= isnull | (op == 0x88) | (op == 0x89)
        cols_np.append(v)
        valids.append(~isnull)
        pos = pos + w
    ok &= (at(pos) == _TUPLE_OP.get(k, ord("t"))) & (at(pos, 1) == 0x94) & (at(pos, 2) == ord(".")) & (pos + 3 == end)
    slow = existed & ~ok
    if slow.any():                                   # any other pickle (an earlier writer's, a LONG1 beyond 8 bytes)
        idx = np.flatnonzero(slow).tolist()
        tuples = [decode_value(values[i]) for i in idx]
        for j in range(k):
            col, val = cols_np[j], valids[j]
            for i, t in zip(idx, tuples):
                x = t[j]
                val[i] = x is not None
                if x is not None:
                    if kinds[j] == "int" and not (-(2 ** 63) <= x < 2 ** 63):
                        return _decode_slow(values, types, existed), pa.array(existed)
                    col[i] = x
    out = []
    for j, t in enumerate(types):
        mask = ~(valids[j] & existed)
        np_t = {"int": np.int64, "float": np.float64, "bool": np.bool_}[kinds[j]]
        a = pa.array(cols_np[j].astype(np_t), mask=mask)
        out.append(a if a.type == t else a.cast(t))
    return out, pa.array(existed)


def _decode_uniform(data: np.ndarray, offs: np.ndarray, kinds: list, types) -> list | None:
    """The columns when every value is one layout of one length (a batch's groups mostly are: counts
    of one size, times of one magnitude): each field is a column slice of the (rows, length) bytes.
    None when they are not (the general parse decides)."""
    n = len(offs) - 1
    length = int(offs[1] - offs[0])
    if offs[0] != 0 or length < 14 or int(offs[-1]) != n * length:
        return None
    mat = data[:n * length].reshape(n, length)
    first = mat[0]
    k = len(kinds)
    head = bytes(first[:3]) == b"\x80\x05\x95" and int.from_bytes(bytes(first[3:11]), "little") == length - 11
    if not head or not (mat[:, :11] == first[:11]).all():
        return None
    pos = 11
    if k > 3:
        if first[pos] != ord("(") or not (mat[:, pos] == first[pos]).all():
            return None
        pos += 1
    out = []
    for kind, t in zip(kinds, types):
        if pos >= length or not (mat[:, pos] == first[pos]).all():
            return None
        op = int(first[pos])
        if kind == "int" and op in (ord("K"), ord("M"), ord("J")):
            w = {ord("K"): 1, ord("M"): 2, ord("J"): 4}[op]
            raw = np.zeros((n, 8 if op != ord("J") else 4), np.uint8)
            raw[:, :w] = mat[:, pos + 1:pos + 1 + w]
            v = raw.view("<i4").reshape(n).astype(np.int64) if op == ord("J") else raw.view("<i8").reshape(n)
            pos += 1 + w
        elif kind == "int" and op == 0x8A and pos + 1 < length and (mat[:, pos + 1] == first[pos + 1]).all() \
                and 1 <= first[pos + 1] <= 8:
            m = int(first[pos + 1])
            raw = np.zeros((n, 8), np.uint8)
            raw[:, :m] = mat[:, pos + 2:pos + 2 + m]
            if m < 8:
                raw[:, m:] = np.where((raw[:, m - 1] & 0x80) != 0, 0xFF, 0)[:, None]
            v = raw.view("<i8").reshape(n)
            pos += 2 + m
        elif kind == "float" and op == ord("G"):
            v = np.ascontiguousarray(mat[:, pos + 1:pos + 9]).view(">f8").reshape(n).astype(np.float64)
            pos += 9
        elif kind == "bool" and op in (0x88, 0x89):
            v = np.full(n, op == 0x88)
            pos += 1
        else:
            return None
        a = pa.array(v)
        out.append(a if a.type == t else a.cast(t))
    tail = bytes((_TUPLE_OP.get(k, ord("t")), 0x94, ord(".")))
    if pos + 3 != length or bytes(first[pos:]) != tail or not (mat[:, pos:] == first[pos:]).all():
        return None
    return out


def _decode_slow(values, types, existed) -> list:
    tuples = [None if v is None else decode_value(v) for v in values]
    return [pa.array([None if t is None else t[j] for t in tuples], type=ty) for j, ty in enumerate(types)]

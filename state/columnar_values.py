"""State values (pickle protocol 5 of a tuple) for whole Arrow columns at once (see state.columnar).

Contract (tests/state/test_columnar.py):
* ``encode_values(columns)[i] == encode_value(tuple(c[i] for c in columns))``: byte for byte what
  ``pickle.dumps(..., protocol=5)`` writes (framing, BININT1/BININT2/BININT/LONG1 by magnitude,
  BINFLOAT, NEWTRUE/NEWFALSE, NONE, TUPLE1-3 or MARK...TUPLE, MEMOIZE), so a store holds the same bytes
  whichever path wrote them (checkpoints of earlier releases and later ones read alike). Columns of
  other types (strings, timestamps...) are pickled by state.encoding row by row.
* ``decode_values(values, types)``: column j of ``decode_value(v)`` for every v (None stays a null
  row), as Arrow arrays of ``types``; values of one layout are column slices, the layouts
  encode_values writes are parsed with numpy, any other pickle is unpickled by state.encoding.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from increments.lazy import lazy_module

from .columnar import SMALL, _compress, _from_offsets, _ints, _plain, _valid, binary_array
from .encoding import decode_value, encode_value

pa = lazy_module("pyarrow")
pc = lazy_module("pyarrow.compute")


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
    return _encode_columns(cols, kinds, n).to_pylist()


def encode_value_array(columns: Sequence) -> "pa.Array":
    """``encode_values(columns)`` as one Arrow binary array (no Python bytes object per row)."""
    cols = [_plain(c) for c in columns]
    n = len(cols[0]) if cols else 0
    kinds = [_value_kind(c.type) for c in cols]
    if not cols or n < SMALL or None in kinds:
        return binary_array(encode_values(cols))
    return _encode_columns(cols, kinds, n)


def _encode_columns(cols: list, kinds: list, n: int) -> "pa.Array":
    """The values of n >= 1 rows of int, float and bool columns (``kinds``), as a binary array."""
    k = len(cols)
    widths, segs = [], []
    for c, kind in zip(cols, kinds):
        valid = _valid(c)
        seg = np.zeros((n, 10), np.uint8)
        if kind == "int":
            v = _ints(c.cast(pa.int64()))
            lo, hi = int(v.min()), int(v.max())
            if (lo >= 0 and hi < 256) and valid.all():     # every one a BININT1 (counts): column writes
                seg[:, 0] = ord("K")
                seg[:, 1] = v
                widths.append(np.full(n, 2))
                segs.append(seg[:, :2])
                continue
            if lo >= _J_MAX and lo.bit_length() // 8 == hi.bit_length() // 8:
                # every one a positive LONG1 of one length (pickle: bit_length // 8 + 1 bytes), as
                # times in microseconds are: plain column writes
                m = lo.bit_length() // 8 + 1
                seg[:, 0] = 0x8A
                seg[:, 1] = m
                seg[:, 2:10] = v.astype("<i8").view(np.uint8).reshape(n, 8)
                widths.append(np.full(n, 2 + m))        # no nulls here: a null is 0, below lo
                segs.append(seg[:, :2 + m])
                continue
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
    if all(int(w.min()) == int(w.max()) for w in widths):     # one layout (counts, times): column writes
        return _fixed_rows([int(w[0]) for w in widths], segs, k, n)
    head = np.empty((n, 11), np.uint8)
    head[:, :3] = (0x80, 0x05, 0x95)                          # PROTO 5, FRAME <8-byte length>
    head[:, 3:] = body.astype("<u8").view(np.uint8).reshape(n, 8)
    tail = np.empty((n, 3), np.uint8)
    tail[:] = (_TUPLE_OP.get(k, ord("t")), 0x94, ord("."))
    mark = [np.full((n, 1), ord("("), np.uint8)] if k > 3 else []
    pieces = [head] + mark + segs + [tail]
    wcols = ([np.full((n, 1), 11)] + [np.ones((n, 1), np.int64)] * len(mark)
             + [w[:, None] for w in widths] + [np.full((n, 1), 3)])
    return _compress(pieces, wcols)


def _fixed_rows(widths: list[int], segs: list, k: int, n: int) -> "pa.Array":
    """The values of _encode_columns when every element has one width in every row: each row is the
    same frame, MARK and tuple bytes around the elements' bytes, written column by column."""
    body = sum(widths) + (1 if k > 3 else 0) + 3
    row = 11 + body
    mat = np.empty((n, row), np.uint8)
    mat[:, :11] = np.frombuffer(bytes((0x80, 0x05, 0x95)) + body.to_bytes(8, "little"), np.uint8)
    at = 11
    if k > 3:
        mat[:, at] = ord("(")
        at += 1
    for w, seg in zip(widths, segs):
        mat[:, at:at + w] = seg[:, :w]
        at += w
    mat[:, at:] = np.frombuffer(bytes((_TUPLE_OP.get(k, ord("t")), 0x94, ord("."))), np.uint8)
    return _from_offsets(np.arange(0, row * n + 1, row, dtype=np.int64), mat.reshape(-1))


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

"""State keys and values for whole Arrow columns at once: the same bytes as state.encoding, without
a Python call per row.

Contract (tested against state.encoding over generated data, tests/state/test_columnar.py):
* ``encode_keys(columns)[i] == encode_key(tuple(c[i] for c in columns))`` (as Python values, i.e.
  ``to_pylist()``) for every row i; columns of a type this module does not encode itself go through
  state.encoding element by element, so every type encode_key takes is accepted here too.
* values: state.columnar_values (encode_values / decode_values), built on this module's helpers.

``binary_array`` moves a Python list of bytes to one Arrow binary array (large_binary when it must).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from increments.lazy import lazy_module

from .encoding import _encode_one, encode_key

pa = lazy_module("pyarrow")
pc = lazy_module("pyarrow.compute")

_NULL_KEY = b"\x01"
#: below this many rows the functions go row by row through state.encoding (numpy's and Arrow's fixed
#: cost per call is larger than a few hundred rows' Python)
SMALL = 256


# -- Python lists <-> Arrow binary -------------------------------------------------------------------
def binary_array(items: Sequence[bytes | None]) -> "pa.Array":
    """``pa.array(items, pa.binary())`` as one array (large_binary beyond 2 GiB, where pa.array would
    give a chunked array). pyarrow 26's own conversion is 4-5x quicker than a join and a length pass."""
    if isinstance(items, (pa.Array, pa.ChunkedArray)):                 # already Arrow (state.memory_runs)
        arr = items.combine_chunks() if isinstance(items, pa.ChunkedArray) else items
        return arr if arr.type in (pa.binary(), pa.large_binary()) else arr.cast(pa.binary())
    n = len(items)
    if n >= SMALL and items[0] is None and items.count(None) == n:     # a changelog of deletes
        return pa.nulls(n, pa.binary())
    arr = pa.array(items, pa.binary())
    if isinstance(arr, pa.Array):
        return arr
    valid = None                                               # beyond 2 GiB: one large_binary array
    try:
        lens = np.fromiter(map(len, items), np.int64, n)
    except TypeError:                                          # None among them
        mask = np.fromiter((x is not None for x in items), np.bool_, n)
        items = [b"" if x is None else x for x in items]
        valid = pa.py_buffer(np.packbits(mask, bitorder="little"))
        lens = np.fromiter(map(len, items), np.int64, n)
    offs = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    return pa.Array.from_buffers(pa.large_binary(), n, [valid, pa.py_buffer(offs), pa.py_buffer(b"".join(items))])


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

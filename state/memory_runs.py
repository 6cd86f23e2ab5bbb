"""Rows of the in-memory store kept as Arrow columns ("runs"): what ``MemoryStateStore.insert_columns``
inserts, held as the (keys, values) binary arrays it was given instead of a dict entry per row, until
something needs the rows by key (state/memory.py moves them into its dict then). A range is popped
from runs by vectorised compares (Arrow orders binary values by their bytes, as Python does).

Contract of ``pop_runs(runs, start, end)``: for runs ``[(keys, values, new)]`` with distinct keys, the
runs without the rows start <= key < end, and the popped rows as (keys, values) of the batch's own
runs (``new``) and of the others, each concatenated (None when there are none); every run keeps its
``new`` flag and its rows' order.
"""
from __future__ import annotations

from increments.lazy import lazy_module

pa = lazy_module("pyarrow")
pc = lazy_module("pyarrow.compute")

Run = tuple  # (keys: pa.Array of binary, values: pa.Array of binary, new: bool -- inserted by this batch)
#: the fewest rows the store keeps as a run (fewer: the dict)
MIN_ROWS = 256
#: a keyed read of n keys probes the runs by Arrow while the runs hold at most PROBE_RATIO * n rows
PROBE_RATIO = 4


def lookup(runs: list[Run], keys: pa.Array):
    """(per-run positions: an int32 array with nulls per run, the values found as one binary array with
    nulls, the positions of the keys found in no run as a numpy array) for DISTINCT keys."""
    import numpy as np  # noqa: PLC0415 - numpy stays off `import state` (the code location)
    olds = pa.nulls(len(keys), pa.binary())
    at = []
    for k, v, _ in runs:
        pos = pc.index_in(keys, value_set=k)
        at.append(pos)
        if pos.null_count < len(pos):
            olds = pc.coalesce(olds, v.take(pos))
    rest = np.flatnonzero(~pc.is_valid(olds).to_numpy(zero_copy_only=False)) if len(keys) else np.zeros(0, np.int64)
    return at, olds, rest


def fill_at(values: pa.Array, positions, items: list) -> pa.Array:
    """``values`` with items (bytes) at the positions (numpy, ascending)."""
    import numpy as np  # noqa: PLC0415 - numpy stays off `import state` (the code location)
    idx = np.full(len(values), -1, np.int64)
    idx[positions] = np.arange(len(items))
    extra = pa.array(items, pa.binary())
    took = extra.take(pa.array(np.where(idx >= 0, idx, 0))) if len(items) else pa.nulls(len(values), pa.binary())
    return pc.if_else(pa.array(idx >= 0), took, values)


def drop_rows(runs: list[Run], at: list) -> tuple[list[Run], int, int]:
    """(the runs without the rows at the positions ``lookup`` found in each, rows dropped, bytes of
    their keys and values)."""
    import numpy as np  # noqa: PLC0415 - numpy stays off `import state` (the code location)
    kept: list[Run] = []
    rows = nb = 0
    for (k, v, new), pos in zip(runs, at):
        if pos.null_count == len(pos):
            kept.append((k, v, new))
            continue
        hit = pos.drop_null().to_numpy()
        keep = np.ones(len(k), np.bool_)
        keep[hit] = False
        rows += len(hit)
        gone = pa.array(~keep)
        nb += nbytes(k.filter(gone)) + nbytes(v.filter(gone))
        if len(hit) < len(k):
            m = pa.array(keep)
            kept.append((k.filter(m), v.filter(m), new))
    return kept, rows, nb


def range_mask(keys: pa.Array, start: bytes | None, end: bytes | None) -> pa.Array | None:
    """start <= key < end for each key (None: every key)."""
    masks = []
    if start is not None:
        masks.append(pc.greater_equal(keys, pa.scalar(start, keys.type)))
    if end is not None:
        masks.append(pc.less(keys, pa.scalar(end, keys.type)))
    if not masks:
        return None
    return masks[0] if len(masks) == 1 else pc.and_(masks[0], masks[1])


def nbytes(arr: pa.Array) -> int:
    """The total length of the values of a binary array."""
    return int(pc.sum(pc.binary_length(arr)).as_py() or 0) if len(arr) else 0


def _concat(parts: list) -> pa.Array | None:
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def pop_runs(runs: list[Run], start: bytes | None, end: bytes | None):
    """(kept runs, (new keys, new values), (other keys, other values)): see the module doc."""
    kept: list[Run] = []
    popped: dict[bool, tuple[list, list]] = {True: ([], []), False: ([], [])}
    for k, v, new in runs:
        m = range_mask(k, start, end)
        n = len(k) if m is None else int(pc.sum(m).as_py() or 0)
        if n == 0:
            kept.append((k, v, new))
            continue
        pk, pv = popped[new]
        if n == len(k):
            pk.append(k)
            pv.append(v)
            continue
        pk.append(k.filter(m))
        pv.append(v.filter(m))
        rest = pc.invert(m)
        kept.append((k.filter(rest), v.filter(rest), new))
    return (kept, (_concat(popped[True][0]), _concat(popped[True][1])),
            (_concat(popped[False][0]), _concat(popped[False][1])))


def remove_keys(runs: list[Run], keys: pa.Array):
    """Remove the rows of DISTINCT ``keys`` from the runs: (kept runs, the rows found in the batch's
    own runs (``new``) as (keys, values) -- None, None when none --, the rows found in the others as
    (keys, values, positions of those keys in ``keys``) -- None when none --, and the keys found in no
    run with their positions). One hash lookup of the remaining keys per run (Arrow's index_in);
    every run keeps its rows' order."""
    import numpy as np  # noqa: PLC0415 - numpy stays off `import state` (the code location)
    kept: list[Run] = []
    new_k: list = []
    new_v: list = []
    other: tuple[list, list, list] = ([], [], [])
    rest, pos = keys, np.arange(len(keys))
    for k, v, new in runs:
        if not len(rest):
            kept.append((k, v, new))
            continue
        at = pc.index_in(rest, value_set=k)
        found = pc.is_valid(at)
        n = int(pc.sum(found).as_py() or 0)
        if n == 0:
            kept.append((k, v, new))
            continue
        rows = at.filter(found)
        fk = rest.filter(found)
        if new:
            new_k.append(fk)
            new_v.append(v.take(rows))
        else:
            f = found.to_numpy(zero_copy_only=False)
            other[0].append(fk)
            other[1].append(v.take(rows))
            other[2].append(pos[f])
        if n < len(k):
            keep = np.ones(len(k), np.bool_)
            keep[rows.to_numpy()] = False
            keep = pa.array(keep)
            kept.append((k.filter(keep), v.filter(keep), new))
        left = pc.invert(found)
        rest, pos = rest.filter(left), pos[left.to_numpy(zero_copy_only=False)]
    others = ((_concat(other[0]), _concat(other[1]), np.concatenate(other[2])) if other[0] else None)
    return kept, (_concat(new_k), _concat(new_v)), others, (rest, pos)


def in_order(parts: list[tuple]):
    """One (keys, values) pair of arrays from parts (keys, values, positions), in the order of the
    positions (distinct)."""
    import numpy as np  # noqa: PLC0415 - numpy stays off `import state` (the code location)
    keys, values = _concat([p[0] for p in parts]), _concat([p[1] for p in parts])
    pos = np.concatenate([p[2] for p in parts])
    if len(pos) > 1 and not (pos[1:] > pos[:-1]).all():
        order = pa.array(np.argsort(pos, kind="stable"))
        keys, values = keys.take(order), values.take(order)
    return keys, values


def sorted_lists(keys: pa.Array, values: pa.Array | None = None) -> tuple[list[bytes], list | None]:
    """The keys in byte order as a list, and the values in the same order (if given)."""
    order = pc.sort_indices(keys)
    return keys.take(order).to_pylist(), (values.take(order).to_pylist() if values is not None else None)


def compact(runs: list[Run], most: int = 8) -> list[Run]:
    """The committed runs (``new`` cleared), concatenated into one when there are more than ``most``."""
    runs = [(k, v, False) for k, v, _ in runs if len(k)]
    if len(runs) > most:
        runs = [(pa.concat_arrays([r[0] for r in runs]), pa.concat_arrays([r[1] for r in runs]), False)]
    return runs


def empty_values(n: int) -> pa.Array:
    """n empty binary values (an index's values), without a Python object per row."""
    import numpy as np  # noqa: PLC0415 - numpy stays off `import state` (the code location)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)), pa.py_buffer(b"")])


def null_where_in(keys: pa.Array, values: pa.Array, gone: list) -> pa.Array:
    """``values`` with a null wherever the key is one of the arrays ``gone`` (deleted since)."""
    mask = pc.is_in(keys, value_set=_concat(gone))
    return pc.if_else(mask, pa.scalar(None, values.type), values)


def changes(keys: list, values: list) -> tuple[pa.Array, pa.Array]:
    """One (keys, values) pair of binary arrays from parts: keys as arrays or lists of bytes, values as
    arrays, or None for a part of deletes (nulls)."""
    ks = [k if isinstance(k, pa.Array) else pa.array(k, pa.binary()) for k in keys]
    vs = [pa.nulls(len(k), pa.binary()) if v is None else v for k, v in zip(ks, values)]
    ks = [k.cast(pa.binary()) if k.type != pa.binary() else k for k in ks]
    vs = [v.cast(pa.binary()) if v.type != pa.binary() else v for v in vs]
    return ((_concat(ks), _concat(vs)) if ks else (pa.array([], pa.binary()), pa.array([], pa.binary())))


def plain(arr) -> pa.Array:
    """One binary array (a chunked array combined, large_binary or other binary-like cast)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr if arr.type == pa.binary() else arr.cast(pa.binary())


def sorted_arrays(keys: pa.Array, values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The keys in byte order and the values in the same order, as arrays."""
    order = pc.sort_indices(keys)
    return keys.take(order), values.take(order)


def as_list(x) -> list:
    return x.to_pylist() if isinstance(x, pa.Array) else x


def as_array(x) -> pa.Array:
    return x if isinstance(x, pa.Array) else pa.array(x, pa.binary())

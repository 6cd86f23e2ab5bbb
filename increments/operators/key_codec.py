"""State keys and values of the stateful operators (aggregate, session_window, dedup) as Arrow
columns and back.

Contract: time values inside state keys are int microseconds since the epoch (UTC), so an
event-time prefix orders keys by time and eviction by watermark is a range delete up to
`time_bound(W_ms)` (every key whose leading time is <= W). Keys and values are the tuples of
state/encoding.py (encode_key / encode_value).
"""
from __future__ import annotations

from typing import Any, Iterable

import pyarrow as pa

from state.encoding import decode_key, decode_value, encode_key

from ..errors import AnalysisException
from ..types import state_type_name


def time_bound(watermark_ms: int) -> bytes:
    """Exclusive scan end covering every key whose leading int time (us) is <= watermark_ms."""
    return encode_key((watermark_ms * 1000 + 1,))


def columns_pylist(table: pa.Table, names: list[str]) -> list[list[Any]]:
    return [table.column(c).to_pylist() for c in names]


def encode_rows(cols: list[list[Any]], prefix: tuple = ()) -> list[bytes]:
    """encode_key(prefix + row) for every row of the column lists."""
    if not cols:
        return []
    return [encode_key(prefix + t) for t in zip(*cols)]


def decode_rows(rows: Iterable[tuple[bytes, bytes]]) -> tuple[list[tuple], list[tuple]]:
    keys, values = [], []
    for k, v in rows:
        keys.append(decode_key(k))
        values.append(decode_value(v))
    return keys, values


def to_arrays(tuples: list[tuple], types: list[pa.DataType], offset: int = 0) -> list[pa.Array]:
    """Column i (from `offset`) of a list of tuples as Arrow arrays of the given types."""
    out = []
    for i, t in enumerate(types):
        out.append(pa.array([r[offset + i] for r in tuples], type=t))
    return out


def as_type(arr: Any, t: pa.DataType) -> Any:
    """``arr.cast(t)``, or `arr` itself when it has that type already (a cast to the same type
    gives the same values: this only saves the compute call, a few thousand instructions each)."""
    return arr if arr.type == t else arr.cast(t)


def us_to_ts(arr: pa.Array, t: pa.DataType = pa.timestamp("us", tz="UTC")) -> pa.Array:
    return as_type(as_type(arr, pa.int64()), t)


def window_struct(start_us: pa.Array, end_us: pa.Array) -> pa.StructArray:
    return pa.StructArray.from_arrays([us_to_ts(start_us), us_to_ts(end_us)], names=["start", "end"])


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_map(t.value_type)
    return False


def refuse_map_keys(where: str, schema: pa.Schema, columns) -> None:
    """AnalysisException when a dedup (or transform_with_state) key column is (or holds) a MAP: Spark
    refuses dropDuplicates on one (UNSUPPORTED_FEATURE.SET_OPERATION_ON_MAP_TYPE). STRUCT and list
    keys are fine (encode_key orders them field by field / element by element); a MAP grouping key
    of an aggregation is accepted, its entries sorted first (aggregate.normalize_map_keys), as Spark 4
    groups by maps."""
    for c in columns:
        if c in schema.names and _has_map(schema.field(c).type):
            raise AnalysisException(
                f"{where}: the column {c!r} ({state_type_name(schema.field(c).type)}) cannot be a key: Spark refuses "
                "a MAP column there (UNSUPPORTED_FEATURE.SET_OPERATION_ON_MAP_TYPE). Use one of its values "
                f"instead, e.g. with_column('k', \"{c}['key']\"), or leave the map out of the subset")

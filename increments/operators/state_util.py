"""Helpers shared by the stateful operators (aggregate, session_window, dedup).

Contracts:
- `partition_sql(cols, n)` assigns a row to a state partition from its key columns only, with
  DuckDB's md5 over the values cast to text: the same key lands in the same partition in every
  process, every run and every version (a checkpoint's partitioning never changes).
- Time values inside state keys are int microseconds since the epoch (UTC), so an event-time
  prefix orders keys by time and eviction by watermark is a range delete up to
  `time_bound(W_ms)` (every key whose leading time is <= W).
- `side_stores(ctx, op, suffix)`: a second set of per-partition stores of the same operator (an
  index, e.g. sessions by end time) opened at batch_id - 1 like ctx.stores(op) and committed or
  aborted with them by the engine; it lives under state/<operator id>-<suffix>/ and is not part of
  the operator's reported metrics (those are the primary stores').
"""
from __future__ import annotations

from typing import Any, Iterable

import pyarrow as pa

from state.encoding import decode_key, decode_value, encode_key

from ..sql import quote_ident


def partition_sql(cols: list[str], n: int) -> str:
    """SQL expression: the state partition (0..n-1) of a row from its key columns."""
    if n <= 1 or not cols:
        return "0"
    parts = ", ".join(f"coalesce(CAST({c} AS VARCHAR), '\\N')" for c in cols)
    return f"CAST(md5_number(concat_ws('\x1f', {parts})) % {n} AS INTEGER)"


def partition_ids(table: pa.Table, cols: list[str], n: int) -> pa.Array:
    """`partition_sql(cols, n)` evaluated over `table` (int32 per row): in Python for integer and
    string columns (md5_number is the little-endian integer of the md5 digest, and their text
    form is Python's), by DuckDB for any other type. Meant for grouped rows (one per key)."""
    import hashlib
    if n <= 1 or not cols or table.num_rows == 0:
        return pa.array([0] * table.num_rows, pa.int32())
    types = [table.schema.field(c).type for c in cols]
    if not all(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t) for t in types):
        from ..sql import run_sql
        sql = partition_sql([quote_ident(c) for c in cols], n)
        return run_sql(f"SELECT {sql} AS __p FROM __g", {"__g": table.select(cols)}).column(0).combine_chunks()
    texts = [["\\N" if v is None else str(v) for v in table.column(c).to_pylist()] for c in cols]
    md5 = hashlib.md5
    return pa.array([int.from_bytes(md5("\x1f".join(row).encode()).digest(), "little") % n for row in zip(*texts)],
                    pa.int32())


def time_bound(watermark_ms: int) -> bytes:
    """Exclusive scan end covering every key whose leading int time (us) is <= watermark_ms."""
    return encode_key((watermark_ms * 1000 + 1,))


def duck_type(t: pa.DataType) -> str:
    """DuckDB type name of an Arrow type (for the state schema file)."""
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    table = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
             pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.string(): "VARCHAR", pa.large_string(): "VARCHAR",
             pa.bool_(): "BOOLEAN", pa.date32(): "DATE", pa.binary(): "BLOB"}
    return table.get(t, str(t).upper())


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


def us_to_ts(arr: pa.Array, t: pa.DataType = pa.timestamp("us", tz="UTC")) -> pa.Array:
    return arr.cast(pa.int64()).cast(t)


def window_struct(start_us: pa.Array, end_us: pa.Array) -> pa.StructArray:
    return pa.StructArray.from_arrays([us_to_ts(start_us), us_to_ts(end_us)], names=["start", "end"])


def side_stores(ctx: Any, op: Any, suffix: str) -> list:
    return ctx.state.stores_for(f"{op.operator_id}-{suffix}", ctx.batch_id)


def q(name: str) -> str:
    return quote_ident(name)


def write_schema_once(op: Any, ctx: Any, key_fields: list, value_fields: list) -> None:
    if getattr(op, "_schema_written", False):
        return
    from state.schema import write_state_schema
    write_state_schema(ctx.state.checkpoint, op.operator_id, key_fields, value_fields)
    op._schema_written = True


def split_by_partition(table: pa.Table, n: int, col: str = "__p") -> list[pa.Table]:
    """The rows of each partition 0..n-1 (vectorised: one sort + slices)."""
    if table.num_rows == 0:
        return [table] * n
    import pyarrow.compute as pc
    table = table.take(pc.sort_indices(table.column(col)))
    counts = {r["values"]: r["counts"] for r in pc.value_counts(table.column(col)).to_pylist()}
    out, pos = [], 0
    for p in range(n):
        c = counts.get(p, 0)
        out.append(table.slice(pos, c))
        pos += c
    return out

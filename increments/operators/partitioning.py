"""State partitioning: which state partition a row of a stateful operator belongs to.

Contract: `partition_sql(cols, n)` assigns a row to a state partition from its key columns only,
with DuckDB's md5 over the values cast to text: the same key lands in the same partition in every
process, every run and every version (a checkpoint's partitioning never changes; `increments
repartition` changes it explicitly, hashing stored keys with `partition_ids`). The stateful
operators, execution/partitioned.py and checkpoint/repartition.py all hash through this module.
"""
from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc

from ..sql import quote_ident, run_sql


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
    if n <= 1 or not cols or table.num_rows == 0:
        return pa.array([0] * table.num_rows, pa.int32())
    types = [table.schema.field(c).type for c in cols]
    if not all(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t) for t in types):
        sql = partition_sql([quote_ident(c) for c in cols], n)
        return run_sql(f"SELECT {sql} AS __p FROM __g", {"__g": table.select(cols)}).column(0).combine_chunks()
    texts = [["\\N" if v is None else str(v) for v in table.column(c).to_pylist()] for c in cols]
    md5 = hashlib.md5
    return pa.array([int.from_bytes(md5("\x1f".join(row).encode()).digest(), "little") % n for row in zip(*texts)],
                    pa.int32())


def split_by_partition(table: pa.Table, n: int, col: str = "__p") -> list[pa.Table]:
    """The rows of each partition 0..n-1 (vectorised: one sort + slices)."""
    if table.num_rows == 0:
        return [table] * n
    table = table.take(pc.sort_indices(table.column(col)))
    counts = {r["values"]: r["counts"] for r in pc.value_counts(table.column(col)).to_pylist()}
    out, pos = [], 0
    for p in range(n):
        c = counts.get(p, 0)
        out.append(table.slice(pos, c))
        pos += c
    return out

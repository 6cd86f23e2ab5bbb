"""Spark's ordering of nested values (STRUCT, list) in DuckDB SQL, for min / max of a nested column.

DuckDB compares structs field by field and lists element by element as Spark does, but puts a NULL
field or element after the values; Spark puts it first (ascending, nulls first, at every level).
`sort_key(sql, t)` is a DuckDB expression whose DuckDB order is Spark's order of the value `sql`
of Arrow type `t`: every nullable part becomes {present, value} (false < true). NULL stays NULL, so
aggregates skip it as min/max skip a NULL value.
"""
from __future__ import annotations

import pyarrow as pa


def is_nested(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t)


def sort_key(sql: str, t: pa.DataType) -> str:
    return f"(CASE WHEN ({sql}) IS NULL THEN NULL ELSE {_inner(sql, t, 0)} END)"


def _inner(sql: str, t: pa.DataType, depth: int) -> str:
    if pa.types.is_struct(t):
        parts = []
        for i in range(t.num_fields):
            f = t.field(i)
            name = f.name.replace("'", "''")
            v = f"struct_extract({sql}, '{name}')"
            parts.append(f"__p{i} := ({v}) IS NOT NULL, __v{i} := {_inner(v, f.type, depth)}")
        return f"struct_pack({', '.join(parts)})"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        x = f"__o{depth}"
        return (f"list_transform({sql}, lambda {x}: struct_pack(p := {x} IS NOT NULL, "
                f"v := {_inner(x, t.value_type, depth + 1)}))")
    return sql


def min_max_sql(func: str, sql: str, t: pa.DataType) -> str:
    """min(sql) / max(sql) in Spark's order (for any type; plain min/max unless nested)."""
    if not is_nested(t):
        return f"{func}({sql})"
    return f"arg_{func}({sql}, {sort_key(sql, t)})"


def least_sql(func: str, a: str, b: str, t: pa.DataType) -> str:
    """least / greatest of two values in Spark's order, NULL when both are (one NULL: the other)."""
    if not is_nested(t):
        return f"{'least' if func == 'min' else 'greatest'}({a}, {b})"
    op = "<=" if func == "min" else ">="
    return (f"(CASE WHEN {a} IS NULL THEN {b} WHEN {b} IS NULL THEN {a} "
            f"WHEN {sort_key(a, t)} {op} {sort_key(b, t)} THEN {a} ELSE {b} END)")

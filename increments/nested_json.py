"""JSON values into nested types (STRUCT, list, MAP) as Spark's JSON reader converts them
(PERMISSIVE, partial results), as one DuckDB SQL expression over a JSON-typed value.

Contract (observed on Spark 4.3, file source and from_json alike):
- a STRUCT takes a JSON object: fields match by name in any order, unknown fields are ignored,
  a missing field is NULL; `{}` is a struct of NULL fields; `null`, a missing key or any other JSON
  type (a number, a string, an array) is a NULL struct;
- a list takes a JSON array (each element converted; a bad element is NULL), anything else NULL;
- a MAP takes a JSON object; when any non-null value does not convert, the whole map is NULL;
- a STRING leaf takes any JSON value: a string as it is, anything else as its JSON text;
- an integer leaf takes a JSON integer that fits (else NULL), DOUBLE/FLOAT/DECIMAL a JSON number,
  BOOLEAN a JSON boolean; a timestamp / date / binary leaf a JSON string that converts.

Top-level flat fields keep the reader's own rules (file_formats.strict_json_types: a wrongly typed
flat field fails the batch); only values inside a nested field are converted here.
"""
from __future__ import annotations

from .identifiers import duckdb_ident
from .types import _parse_type_text, _render

_INTEGERS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT"}
_NUMBERS = {"DOUBLE", "FLOAT"}


def json_to_sql(expr: str, duckdb_type: str) -> str:
    """SQL converting the JSON-typed `expr` into `duckdb_type` (see the module contract)."""
    return _conv(expr, _parse_type_text(duckdb_type), 0)


def _conv(j: str, t: tuple, depth: int) -> str:
    kind = t[0]
    jt = f"json_type({j})"
    if kind == "struct":
        parts = ", ".join(f"{duckdb_ident(name)} := {_conv(_field(j, name), ft, depth)}" for name, ft in t[1])
        return f"(CASE WHEN {jt} = 'OBJECT' THEN struct_pack({parts}) END)"
    if kind == "list":
        x = f"__x{depth}"
        return (f"(CASE WHEN {jt} = 'ARRAY' THEN list_transform(CAST({j} AS JSON[]), "
                f"lambda {x}: {_conv(x, t[1], depth + 1)}) END)")
    if kind == "map":
        e = f"__e{depth}"
        key_t, val_t = _render(t[1]), t[2]
        key = f"{e}.key" if key_t == "VARCHAR" else f"TRY_CAST({e}.key AS {key_t})"
        value = _conv(f"{e}.value", val_t, depth + 1)
        entries = f"map_entries(CAST({j} AS MAP(VARCHAR, JSON)))"
        bad = (f"list_bool_or(list_transform({entries}, lambda {e}: ({key}) IS NULL OR "
               f"(coalesce(json_type({e}.value), 'NULL') <> 'NULL' AND ({value}) IS NULL)))")
        built = (f"map_from_entries(list_transform({entries}, lambda {e}: "
                 f"struct_pack(key := {key}, value := {value})))")
        # an empty object: an empty map (list_bool_or of [] is NULL)
        return (f"(CASE WHEN {jt} <> 'OBJECT' OR {jt} IS NULL THEN NULL WHEN coalesce({bad}, false) THEN NULL "
                f"ELSE {built} END)")
    if kind == "decimal":
        return f"(CASE WHEN {jt} IN ('BIGINT', 'UBIGINT', 'DOUBLE') THEN TRY_CAST({j} AS {_render(t)}) END)"
    name = t[1]
    if name == "VARCHAR":
        return (f"(CASE WHEN {jt} = 'VARCHAR' THEN json_extract_string({j}, '$') WHEN {jt} = 'NULL' THEN NULL "
                f"ELSE CAST({j} AS VARCHAR) END)")
    if name in _INTEGERS:
        return f"(CASE WHEN {jt} IN ('BIGINT', 'UBIGINT') THEN TRY_CAST({j} AS {name}) END)"
    if name in _NUMBERS:
        return f"(CASE WHEN {jt} IN ('BIGINT', 'UBIGINT', 'DOUBLE') THEN TRY_CAST({j} AS {name}) END)"
    if name == "BOOLEAN":
        return f"(CASE WHEN {jt} = 'BOOLEAN' THEN TRY_CAST({j} AS BOOLEAN) END)"
    return f"(CASE WHEN {jt} = 'VARCHAR' THEN TRY_CAST(json_extract_string({j}, '$') AS {name}) END)"


def _field(j: str, name: str) -> str:
    path = '$."' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"json_extract({j}, '{path.replace(chr(39), chr(39) * 2)}')"



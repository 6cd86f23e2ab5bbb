"""The state schema of an operator: ``<checkpoint>/state/<operator>/_schema.json``.

Format: ``{"key": [[name, type], ...], "value": [[name, type], ...]}`` with DuckDB type
names (TIMESTAMPTZ, VARCHAR, BIGINT, DOUBLE, ...).  Operators write it when they first run;
the state reader uses it to turn encoded keys/values into typed Arrow columns.
"""
from __future__ import annotations

import json
import os

import pyarrow as pa

from . import files


def schema_path(checkpoint_dir: str, operator: str) -> str:
    return os.path.join(checkpoint_dir, "state", operator, "_schema.json")


def _fields(fields) -> list[list[str]]:
    return [[str(n), str(t)] for n, t in fields]


def write_state_schema(checkpoint_dir: str, operator: str, key_fields, value_fields) -> None:
    """Record the (name, DuckDB type) pairs of the operator's key and value tuples (atomic)."""
    files.write_json(schema_path(checkpoint_dir, operator),
                     {"key": _fields(key_fields), "value": _fields(value_fields)})


def read_state_schema(checkpoint_dir: str, operator: str) -> dict | None:
    """{"key": [[name, type]...], "value": [...]} or None when the operator recorded none."""
    try:
        with open(schema_path(checkpoint_dir, operator)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


_ARROW = {
    "BOOLEAN": pa.bool_(), "BOOL": pa.bool_(),
    "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INTEGER": pa.int32(), "INT": pa.int32(),
    "BIGINT": pa.int64(), "UBIGINT": pa.uint64(), "UINTEGER": pa.uint32(),
    "FLOAT": pa.float32(), "REAL": pa.float32(), "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(), "TEXT": pa.string(), "BLOB": pa.binary(),
    "DATE": pa.date32(), "TIMESTAMP": pa.timestamp("us"),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
    "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
}


def arrow_type(duckdb_type: str) -> pa.DataType | None:
    """Arrow type for a DuckDB type name; None (= infer from the values) when unknown."""
    return _ARROW.get(duckdb_type.strip().upper())

"""The state schema of an operator: ``<checkpoint>/state/<operator>/_schema.json``.

Format: ``{"key": [[name, type], ...], "value": [[name, type], ...]}`` with DuckDB type
names (TIMESTAMPTZ, VARCHAR, BIGINT, DOUBLE, ...).  Operators write it when they first run;
the state reader uses it to turn encoded keys/values into typed Arrow columns (the names map
to Arrow types in increments.types, the project's one type module).

Written create-only: every attempt of a query writes the same schema, so one finding it present
with the same content leaves it alone (a zombie never rewrites what the winner wrote). Only a
changed query (other types) replaces it, which no concurrent attempt of the same query does.
"""
from __future__ import annotations

import json

from increments import storage

SCHEMA_FILE = "_schema.json"


def _operator_loc(checkpoint, operator: str, storage_options: dict | None = None):
    return storage.location(checkpoint, storage_options).child("state", operator)


def _fields(fields) -> list[list[str]]:
    return [[str(n), str(t)] for n, t in fields]


def write_state_schema(checkpoint, operator: str, key_fields, value_fields) -> None:
    """Record the (name, DuckDB type) pairs of the operator's key and value tuples; ``checkpoint``
    is a Location or a path/URL."""
    loc = _operator_loc(checkpoint, operator)
    body = {"key": _fields(key_fields), "value": _fields(value_fields)}
    data = json.dumps(body, sort_keys=True).encode()
    try:
        loc.write_bytes(SCHEMA_FILE, data, create_only=True)
    except FileExistsError:
        try:
            same = json.loads(loc.read_bytes(SCHEMA_FILE)) == body
        except (FileNotFoundError, ValueError):
            same = False
        if not same:
            loc.write_bytes(SCHEMA_FILE, data)


def read_state_schema(checkpoint, operator: str, storage_options: dict | None = None) -> dict | None:
    """{"key": [[name, type]...], "value": [...]} or None when the operator recorded none."""
    try:
        return json.loads(_operator_loc(checkpoint, operator, storage_options).read_bytes(SCHEMA_FILE))
    except FileNotFoundError:
        return None

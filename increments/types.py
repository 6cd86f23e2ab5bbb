"""Schema strings ("campaign_id STRING, event_time TIMESTAMP") to Arrow and DuckDB types.

`TIMESTAMP` is an instant: Arrow timestamp("us", tz="UTC"), DuckDB TIMESTAMPTZ.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

_ALIASES = {
    "STRING": "VARCHAR", "TEXT": "VARCHAR", "VARCHAR": "VARCHAR",
    "INT": "INTEGER", "INTEGER": "INTEGER", "LONG": "BIGINT", "BIGINT": "BIGINT",
    "SHORT": "SMALLINT", "SMALLINT": "SMALLINT", "TINYINT": "TINYINT", "BYTE": "TINYINT",
    "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "REAL": "FLOAT",
    "BOOLEAN": "BOOLEAN", "BOOL": "BOOLEAN",
    "TIMESTAMP": "TIMESTAMPTZ", "TIMESTAMPTZ": "TIMESTAMPTZ", "TIMESTAMP_LTZ": "TIMESTAMPTZ",
    "TIMESTAMP_NTZ": "TIMESTAMP",
    "DATE": "DATE", "BINARY": "BLOB", "BLOB": "BLOB",
}
_ARROW = {
    "VARCHAR": pa.string(), "INTEGER": pa.int32(), "BIGINT": pa.int64(), "SMALLINT": pa.int16(),
    "TINYINT": pa.int8(), "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "BOOLEAN": pa.bool_(),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"), "TIMESTAMP": pa.timestamp("us"),
    "DATE": pa.date32(), "BLOB": pa.binary(),
}


@dataclass(frozen=True)
class Field:
    name: str
    duckdb_type: str

    @property
    def arrow_type(self) -> pa.DataType:
        if self.duckdb_type.startswith("DECIMAL"):
            p, s = re.findall(r"\d+", self.duckdb_type)
            return pa.decimal128(int(p), int(s))
        return _ARROW[self.duckdb_type]


@dataclass(frozen=True)
class Schema:
    fields: tuple[Field, ...]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def to_arrow(self) -> pa.Schema:
        return pa.schema([pa.field(f.name, f.arrow_type) for f in self.fields])

    def duckdb_struct(self) -> str:
        """JSON structure text for DuckDB's json_transform: {"a":"VARCHAR",...}."""
        import json
        return json.dumps({f.name: f.duckdb_type for f in self.fields})

    def __str__(self) -> str:
        return ", ".join(f"{f.name} {f.duckdb_type}" for f in self.fields)


def _normalise(type_text: str) -> str:
    t = type_text.strip().upper()
    if t.startswith("DECIMAL"):
        return re.sub(r"\s+", "", t)
    if t not in _ALIASES:
        raise ValueError(f"unknown type {type_text!r}; use one of STRING, BIGINT, INT, DOUBLE, BOOLEAN, TIMESTAMP, DATE, BINARY, DECIMAL(p,s)")
    return _ALIASES[t]


def parse_schema(schema: "str | Schema | pa.Schema") -> Schema:
    """Parse "a STRING, b BIGINT" (or an Arrow schema) into a Schema."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, pa.Schema):
        return Schema(tuple(Field(f.name, arrow_to_duckdb(f.type)) for f in schema))
    fields = []
    for part in re.split(r",(?![^(]*\))", schema):
        part = part.strip()
        if not part:
            continue
        bits = part.split(None, 1)
        if len(bits) != 2:
            raise ValueError(f"cannot parse schema field {part!r}: expected 'name TYPE'")
        name = bits[0].strip("`\"")
        fields.append(Field(name, _normalise(bits[1].replace(":", " ").strip())))
    if not fields:
        raise ValueError(f"empty schema {schema!r}")
    return Schema(tuple(fields))


def arrow_to_duckdb(t: pa.DataType) -> str:
    """The DuckDB type name of an Arrow type (for the types schemas can declare)."""
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_large_string(t):
        return "VARCHAR"
    if pa.types.is_large_binary(t):
        return "BLOB"
    for name, at in _ARROW.items():
        if at == t:
            return name
    raise ValueError(f"type {t} cannot be declared in a schema")

"""The one Arrow <-> DuckDB type mapping: schema strings ("campaign_id STRING, event_time
TIMESTAMP") to Arrow and DuckDB types, and the DuckDB type names of state schemas.

In a schema string `TIMESTAMP` is an instant (Spark's): Arrow timestamp("us", tz="UTC"), DuckDB
TIMESTAMPTZ; `TIMESTAMP_NTZ` is the naive one. DuckDB type names themselves (state schemas,
`duckdb_to_arrow`) mean what DuckDB means: TIMESTAMP is naive.

- `parse_schema` / `Field.arrow_type`: the types a schema can declare (`_ARROW`, DECIMAL(p,s)).
- `arrow_to_duckdb(t)`: the DuckDB name of an Arrow type a schema can declare; anything else raises.
- `state_type_name(t)`: the name a stateful operator records for a key or value column in its
  state schema (checkpoint metadata and state/<op>/_schema.json); never raises. Types outside
  the table keep Arrow's spelling upper-cased (DECIMAL128(10, 2), LARGE_BINARY): checkpoints
  recorded those names and `increments check` compares them, so they must not change.
- `duckdb_to_arrow(name)`: the Arrow type of a DuckDB type name read back from a state schema
  (the names state_type_name records included: DECIMAL128(p, s), UINT64, LARGE_BINARY), None when
  unknown (the reader then infers the type from the values).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .lazy import lazy_module

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py

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
@functools.cache
def _tables() -> tuple[dict[str, pa.DataType], dict[pa.DataType, str], dict[str, pa.DataType]]:
    """(_ARROW, _NAMES, _READ_BACK), built at first use (pyarrow loads then, not with this module):
    _ARROW: the Arrow type of each DuckDB type name a schema can declare; _NAMES: its inverse;
    _READ_BACK: the names a state schema may hold besides _ARROW's (DuckDB's synonyms and unsigned
    types, and the Arrow spellings state_type_name records for unsigned integers and large binary)."""
    arrow = {
        "VARCHAR": pa.string(), "INTEGER": pa.int32(), "BIGINT": pa.int64(), "SMALLINT": pa.int16(),
        "TINYINT": pa.int8(), "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "BOOLEAN": pa.bool_(),
        "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"), "TIMESTAMP": pa.timestamp("us"),
        "DATE": pa.date32(), "BLOB": pa.binary(),
    }
    names = {t: name for name, t in arrow.items()}
    read_back = {
        **arrow, "BOOL": pa.bool_(), "INT": pa.int32(), "REAL": pa.float32(), "TEXT": pa.string(),
        "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"), "UBIGINT": pa.uint64(), "UINTEGER": pa.uint32(),
        "USMALLINT": pa.uint16(), "UTINYINT": pa.uint8(),
        "UINT64": pa.uint64(), "UINT32": pa.uint32(), "UINT16": pa.uint16(), "UINT8": pa.uint8(),
        "LARGE_BINARY": pa.large_binary(),
    }
    return arrow, names, read_back


#: DECIMAL(p,s) as schemas write it, DECIMAL128(p, s) as state_type_name records it
_DECIMAL = re.compile(r"DECIMAL(?:128)?\(\s*(\d+)\s*,\s*(\d+)\s*\)")


@dataclass(frozen=True)
class Field:
    name: str
    duckdb_type: str

    @property
    def arrow_type(self) -> pa.DataType:
        if self.duckdb_type.startswith("DECIMAL"):
            p, s = re.findall(r"\d+", self.duckdb_type)
            return pa.decimal128(int(p), int(s))
        return _tables()[0][self.duckdb_type]


@dataclass(frozen=True)
class Schema:
    fields: tuple[Field, ...]

    def __post_init__(self) -> None:
        """A column name may appear once (compared case-insensitively, as Spark and DuckDB resolve
        names): a duplicate is refused here, where the schema is declared, naming it."""
        seen: dict[str, str] = {}
        for f in self.fields:
            key = f.name.lower()
            if key in seen:
                other = seen[key]
                what = (f"the column {f.name!r} is declared twice" if other == f.name else
                        f"the columns {other!r} and {f.name!r} are one name (names are compared case-insensitively)")
                raise ValueError(f"schema {', '.join(f'{x.name} {x.duckdb_type}' for x in self.fields)!r}: {what}; "
                                 "give each column its own name")
            seen[key] = f.name

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
    if not isinstance(schema, str) and isinstance(schema, pa.Schema):
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


def _table_name(t: pa.DataType) -> str | None:
    """The DuckDB name of a timestamp (any unit), a large string or a type of _ARROW; else None."""
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    if pa.types.is_large_string(t):
        return "VARCHAR"
    return _tables()[1].get(t)


def arrow_to_duckdb(t: pa.DataType) -> str:
    """The DuckDB type name of an Arrow type (for the types schemas can declare)."""
    name = _table_name(t)
    if name is not None:
        return name
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_large_binary(t):
        return "BLOB"
    raise ValueError(f"type {t} cannot be declared in a schema")


def state_type_name(t: pa.DataType) -> str:
    """The DuckDB type name a state schema records for a column of Arrow type `t` (see the module
    doc: types outside the table keep Arrow's upper-cased spelling, as checkpoints recorded it)."""
    return _table_name(t) or str(t).upper()


def duckdb_to_arrow(name: str) -> pa.DataType | None:
    """The Arrow type of a DuckDB type name from a state schema (or of the name state_type_name
    recorded for it); None when unknown (infer it)."""
    name = name.strip().upper()
    m = _DECIMAL.fullmatch(name)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    return _tables()[2].get(name)

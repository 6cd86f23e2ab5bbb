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
  recorded those names and `increments check` compares them, so they must not change. Nested
  types (never a state key before) are named in DuckDB's spelling: STRUCT(id VARCHAR), VARCHAR[].

Nested types: Spark's DDL (`STRUCT<a: INT, b STRING>`, `ARRAY<T>`, `MAP<K, V>`, nested freely) and
DuckDB's spelling (`STRUCT(a INTEGER)`, `INTEGER[]`, `MAP(K, V)`) are both accepted wherever a
schema is; `Field.duckdb_type` holds DuckDB's spelling; Arrow struct / list / map.
- `duckdb_to_arrow(name)`: the Arrow type of a DuckDB type name read back from a state schema
  (the names state_type_name records included: DECIMAL128(p, s), UINT64, LARGE_BINARY), None when
  unknown (the reader then infers the type from the values).
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from .identifiers import duckdb_ident
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
        return _arrow_of(self.duckdb_type)


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
        """JSON structure text for DuckDB's json_transform: {"a":"VARCHAR","e":{"id":"BIGINT"},
        "tags":["VARCHAR"],"m":"MAP(VARCHAR, BIGINT)"} (structs and lists nested as JSON)."""
        return json.dumps({f.name: _json_structure(_parse_type_text(f.duckdb_type)) for f in self.fields})

    def __str__(self) -> str:
        return ", ".join(f"{f.name} {f.duckdb_type}" for f in self.fields)


# -- the type grammar ----------------------------------------------------------------------------
# A type is a tree: ("scalar", NAME) | ("decimal", p, s) | ("struct", ((name, type), ...)) |
# ("list", type) | ("map", key_type, value_type). Spark's DDL (STRUCT<a: INT, b STRING>,
# ARRAY<T>, MAP<K, V>) and DuckDB's (STRUCT(a INTEGER), T[], MAP(K, V), LIST(T)) both parse into it;
# `duckdb_type` texts are rendered from it in DuckDB's spelling.
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|(\"(?:[^\"]|\"\")*\")|([A-Za-z_][A-Za-z0-9_$]*)|(\d+)|('(?:[^']|'')*')|(.))")


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: 'name' (a bare or quoted identifier, unquoted), 'word' (bare),
    'num', 'str', or the punctuation itself."""
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            break
        pos = m.end()
        bq, dq, word, num, lit, punct = m.groups()
        if bq is not None:
            out.append(("name", bq[1:-1].replace("``", "`")))
        elif dq is not None:
            out.append(("name", dq[1:-1].replace('""', '"')))
        elif word is not None:
            out.append(("word", word))
        elif num is not None:
            out.append(("num", num))
        elif lit is not None:
            out.append(("str", lit))
        elif punct is not None and not punct.isspace():
            out.append((punct, punct))
    return out


class _Parser:
    def __init__(self, text: str, duckdb_names: bool = False):
        # duckdb_names: the text is DuckDB's spelling (a Field.duckdb_type, a state schema's name),
        # where TIMESTAMP is naive; else a schema string's, where TIMESTAMP is an instant
        self.text, self.toks, self.i = text, _tokens(text), 0
        self.names = _DUCKDB_NAMES if duckdb_names else _ALIASES

    def peek(self, k: int = 0) -> tuple[str, str]:
        return self.toks[self.i + k] if self.i + k < len(self.toks) else ("end", "")

    def take(self, *kinds: str) -> tuple[str, str]:
        tok = self.peek()
        if kinds and tok[0] not in kinds and tok[1].upper() not in kinds:
            raise ValueError(f"cannot parse type {self.text!r}: expected {' or '.join(kinds)} at {tok[1] or 'the end'!r}")
        self.i += 1
        return tok

    def at(self, *texts: str) -> bool:
        return self.peek()[1].upper() in texts and self.peek()[0] != "name"

    def type(self) -> tuple:
        kind, word = self.take()
        w = word.upper() if kind == "word" else None
        if w == "STRUCT":
            close = {"<": ">", "(": ")"}[self.take("<", "(")[0]]
            fields = []
            while not self.at(close):
                fname = self.take("word", "name")[1]
                if self.at(":"):
                    self.take(":")
                fields.append((fname, self.type()))
                self._skip_field_extras()
                if not self.at(close):
                    self.take(",", close)
            self.take(close)
            if not fields:
                raise ValueError(f"cannot parse type {self.text!r}: a STRUCT needs at least one field")
            t: tuple = ("struct", tuple(fields))
        elif w in ("ARRAY", "LIST") and self.at("<", "("):
            close = {"<": ">", "(": ")"}[self.take("<", "(")[0]]
            t = ("list", self.type())
            self.take(close)
        elif w == "MAP" and self.at("<", "("):
            close = {"<": ">", "(": ")"}[self.take("<", "(")[0]]
            key = self.type()
            self.take(",")
            t = ("map", key, self.type())
            self.take(close)
        elif w in ("DECIMAL", "NUMERIC", "DEC"):
            p, sc = 10, 0
            if self.at("("):
                self.take("(")
                p = int(self.take("num")[1])
                if self.at(","):
                    self.take(",")
                    sc = int(self.take("num")[1])
                self.take(")")
            t = ("decimal", p, sc)
        elif w is not None:
            name = w
            if w == "TIMESTAMP" and self.at("WITH"):      # DuckDB's TIMESTAMP WITH TIME ZONE
                for part in ("WITH", "TIME", "ZONE"):
                    self.take(part)
                name = "TIMESTAMPTZ"
            if name not in self.names:
                raise ValueError(f"unknown type {word!r} in {self.text!r}; use one of STRING, BIGINT, INT, DOUBLE, "
                                 "BOOLEAN, TIMESTAMP, DATE, BINARY, DECIMAL(p,s), STRUCT<a: T, ...>, ARRAY<T>, MAP<K, V>")
            t = ("scalar", self.names[name])
        else:
            raise ValueError(f"cannot parse type {self.text!r}: expected a type name at {word or 'the end'!r}")
        while self.at("[") and self.peek(1)[0] == "]":    # DuckDB's T[]
            self.take("[")
            self.take("]")
            t = ("list", t)
        return t

    def _skip_field_extras(self) -> None:
        """Spark DDL allows `NOT NULL` and `COMMENT '...'` after a field's type: accepted, ignored."""
        while True:
            if self.at("NOT") and self.peek(1)[1].upper() == "NULL":
                self.take()
                self.take()
            elif self.at("COMMENT") and self.peek(1)[0] == "str":
                self.take()
                self.take()
            else:
                return


def _render(t: tuple) -> str:
    """A type tree in DuckDB's spelling (field names quoted when they need it)."""
    kind = t[0]
    if kind == "scalar":
        return t[1]
    if kind == "decimal":
        return f"DECIMAL({t[1]},{t[2]})"
    if kind == "list":
        return f"{_render(t[1])}[]"
    if kind == "map":
        return f"MAP({_render(t[1])}, {_render(t[2])})"
    return "STRUCT(" + ", ".join(f"{duckdb_ident(n)} {_render(ft)}" for n, ft in t[1]) + ")"




def _arrow_tree(t: tuple) -> pa.DataType:
    kind = t[0]
    if kind == "scalar":
        return _tables()[0][t[1]]
    if kind == "decimal":
        return pa.decimal128(t[1], t[2])
    if kind == "list":
        return pa.list_(_arrow_tree(t[1]))
    if kind == "map":
        return pa.map_(_arrow_tree(t[1]), _arrow_tree(t[2]))
    return pa.struct([pa.field(n, _arrow_tree(ft)) for n, ft in t[1]])


def _json_structure(t: tuple):
    if t[0] == "struct":
        return {n: _json_structure(ft) for n, ft in t[1]}
    if t[0] == "list":
        return [_json_structure(t[1])]
    return _render(t)


_TREES: dict[str, tuple] = {}
#: scalar names in DuckDB's own spelling (TIMESTAMP is naive there)
_DUCKDB_NAMES = {**_ALIASES, "TIMESTAMP": "TIMESTAMP"}


def _parse_type_text(text: str) -> tuple:
    """The type tree of a type's text in DuckDB's spelling (a Field.duckdb_type or a state schema
    name: TIMESTAMP is naive); ValueError when it is not one."""
    tree = _TREES.get(text)
    if tree is None:
        p = _Parser(text, duckdb_names=True)
        tree = p.type()
        if p.peek()[0] != "end":
            raise ValueError(f"cannot parse type {text!r}: unexpected {p.peek()[1]!r}")
        _TREES[text] = tree
    return tree


def _arrow_of(duckdb_type: str) -> pa.DataType:
    return _arrow_tree(_parse_type_text(duckdb_type))


def is_nested(duckdb_type: str) -> bool:
    """Is this a STRUCT, list or MAP type (its text in either spelling)?"""
    return _parse_type_text(duckdb_type)[0] in ("struct", "list", "map")


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside <>, () and quotes."""
    parts, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "`\"'":
            quote = ch
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_schema(schema: "str | Schema | pa.Schema") -> Schema:
    """Parse "a STRING, b BIGINT, e STRUCT<id: STRING>, tags ARRAY<STRING>" (Spark's DDL or DuckDB's
    type spelling; `name: TYPE` too) or an Arrow schema into a Schema."""
    if isinstance(schema, Schema):
        return schema
    if not isinstance(schema, str) and isinstance(schema, pa.Schema):
        return Schema(tuple(Field(f.name, arrow_to_duckdb(f.type)) for f in schema))
    fields = []
    for part in _split_top(schema):
        part = part.strip()
        if not part:
            continue
        m = re.match(r"\s*(`(?:[^`]|``)*`|\"(?:[^\"]|\"\")*\"|[^\s:]+)\s*:?\s*(.*)$", part, flags=re.S)
        if m is None or not m.group(2).strip():
            raise ValueError(f"cannot parse schema field {part!r}: expected 'name TYPE'")
        raw = m.group(1)
        name = raw[1:-1].replace(raw[0] * 2, raw[0]) if raw[0] in "`\"" else raw
        p = _Parser(m.group(2))
        tree = p.type()
        p._skip_field_extras()
        if p.peek()[0] != "end":
            raise ValueError(f"cannot parse schema field {part!r}: unexpected {p.peek()[1]!r}")
        fields.append(Field(name, _render(tree)))
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
    nested = _nested_name(t, arrow_to_duckdb)
    if nested is not None:
        return nested
    raise ValueError(f"type {t} cannot be declared in a schema")


def _nested_name(t: pa.DataType, inner) -> str | None:
    """DuckDB's name of a struct, list or map type whose parts `inner` names; None otherwise."""
    if pa.types.is_struct(t):
        return "STRUCT(" + ", ".join(f"{duckdb_ident(t.field(i).name)} {inner(t.field(i).type)}"
                                     for i in range(t.num_fields)) + ")"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"{inner(t.value_type)}[]"
    if pa.types.is_map(t):
        return f"MAP({inner(t.key_type)}, {inner(t.item_type)})"
    return None


def state_type_name(t: pa.DataType) -> str:
    """The DuckDB type name a state schema records for a column of Arrow type `t` (see the module
    doc: types outside the table keep Arrow's upper-cased spelling, as checkpoints recorded it)."""
    return _table_name(t) or _nested_name(t, state_type_name) or str(t).upper()


def duckdb_to_arrow(name: str) -> pa.DataType | None:
    """The Arrow type of a DuckDB type name from a state schema (or of the name state_type_name
    recorded for it); None when unknown (infer it)."""
    original, name = name, name.strip().upper()
    m = _DECIMAL.fullmatch(name)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    if name in _tables()[2]:
        return _tables()[2][name]
    if "(" in name or name.endswith("[]"):       # a nested type state_type_name recorded
        try:
            return _arrow_of(original.strip())
        except (ValueError, KeyError):
            return None
    return None

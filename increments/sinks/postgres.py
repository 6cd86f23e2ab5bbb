"""format("postgres"): exactly-once writes to a PostgreSQL table through psycopg 3.

Options: `url` (SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db; postgresql:// means
psycopg too, increments/pg_driver.py), `table` (optionally schema-qualified "schema.table").
The connection and its transaction come from a SQLAlchemy engine; every statement is composed
with psycopg.sql (names as sql.Identifier, values as parameters), never by formatting text, and
runs on that transaction's psycopg connection (`execute`).

Each batch is ONE transaction that (1) locks and reads this query's row in the marker table
`increments_sink_batches(query_id, target, last_batch_id)`, (2) writes the rows, (3) sets the
marker to the batch id. Recovery rule: a batch whose id is <= the marker is already in the table
(a redo after a crash between this commit and commits[N]) and is skipped; a crash before this
commit leaves nothing. The row lock on the marker also serialises two runners of one query.

- append: COPY the rows in.
- update: COPY into a temporary table, then INSERT ... ON CONFLICT (keys) DO UPDATE for the rows
  whose keys are all non-NULL; a row with a NULL key replaces the row whose keys are NOT DISTINCT
  from its own (DELETE, then INSERT: ON CONFLICT never matches NULLs), so a NULL group is one row,
  updated in place, as Spark's result keys are null-safe. The sink creates the table with UNIQUE
  NULLS NOT DISTINCT (keys) (PostgreSQL 15+; PRIMARY KEY before 15, which cannot hold a NULL key:
  such a batch fails naming the column); an existing table needs a unique index on the keys.
- complete: DELETE every row, then COPY the whole result (readers never see a partial table).

The table is created from the Arrow schema on the first batch. Struct columns (e.g. `window`)
are flattened to `<name>_<field>` (window_start, window_end), as PostgreSQL has no struct type;
ARRAY and MAP columns (also inside a flattened struct) are JSONB: a list as a JSON array, a map as
a JSON object (keys as text), a struct inside either as an object (DuckDB's to_json).
"""
from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import sqlalchemy as sa
from psycopg import sql

from ..errors import SinkSchemaError
from ..options import sink_options
from ..pg_driver import DRIVER, driver, psycopg_url
from ..sql import run_sql
from .base import Sink, SinkResult

MARKER = "increments_sink_batches"
_MARKER = sql.Identifier(MARKER)


def table_ident(name: str) -> sql.Identifier:
    """`schema.table` or `table`, each part a quoted name (a dot always separates the schema)."""
    return sql.Identifier(*str(name).split("."))


def ident_list(cols) -> sql.Composed:
    """A comma-separated list of quoted column names."""
    return sql.SQL(", ").join(sql.Identifier(c) for c in cols)


def execute(conn: sa.Connection, query: sql.Composable, params: Any = None):
    """Run `query` in `conn`'s transaction, on its psycopg connection; the psycopg cursor."""
    return conn.connection.driver_connection.execute(query, params)


def pg_type(t: pa.DataType) -> str:
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "SMALLINT"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "INTEGER"
    if pa.types.is_integer(t):
        return "BIGINT"
    if pa.types.is_float32(t):
        return "REAL"
    if pa.types.is_floating(t):
        return "DOUBLE PRECISION"
    if pa.types.is_decimal(t):
        return f"NUMERIC({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    if pa.types.is_date(t):
        return "DATE"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "BYTEA"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "TEXT"
    if _is_json(t):
        return "JSONB"
    raise TypeError(f"format('postgres'): no PostgreSQL type for Arrow {t}; cast the column in a select first")


def _is_json(t: pa.DataType) -> bool:
    """ARRAY / MAP columns (and structs inside them) go to JSONB."""
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_map(t)


def _json_text(col) -> pa.Array:
    """A list / map column as JSON text (NULL stays NULL), by DuckDB's to_json."""
    return run_sql("SELECT CAST(to_json(c) AS VARCHAR) AS c FROM __j", {"__j": pa.table({"c": col})}).column("c")


def flatten(table: pa.Table) -> pa.Table:
    """Struct columns -> <name>_<field> columns (recursively); binary -> \\x hex text for COPY."""
    cols, names = [], []
    for name, col in zip(table.column_names, table.columns):
        if pa.types.is_struct(col.type):
            sub = flatten(pa.Table.from_arrays(col.combine_chunks().flatten(), names=[f.name for f in col.type]))
            cols += sub.columns
            names += [f"{name}_{n}" for n in sub.column_names]
        else:
            cols.append(col)
            names.append(name)
    return pa.Table.from_arrays(cols, names=names)


def _csv_ready(table: pa.Table) -> pa.Table:
    cols = []
    for col in table.columns:
        if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
            col = pa.array([None if v is None else "\\x" + v.hex() for v in col.to_pylist()], pa.string())
        elif pa.types.is_timestamp(col.type) and col.type.tz:
            col = pc.strftime(col, "%Y-%m-%dT%H:%M:%S+00:00")
        elif _is_json(col.type):
            col = _json_text(col)
        cols.append(col)
    return pa.Table.from_arrays(cols, names=table.column_names)


class PostgresSink(Sink):
    def __init__(self, options: dict[str, Any]):
        o = sink_options("postgres", options, "format('postgres')")
        self.url, self.table = o["url"], o["table"]
        if not self.url or not self.table:
            raise ValueError("format('postgres') needs .option('url', 'postgresql+psycopg://...') and "
                             ".option('table', 'name')")
        if driver(self.url) != DRIVER:
            raise ValueError(f"format('postgres'): the url option names the driver {driver(self.url) or 'of another database'!r}; "
                             "the sink writes through psycopg 3: give a postgresql+psycopg:// (or postgresql://) URL")
        self.url = psycopg_url(self.url)
        self.target = table_ident(self.table)
        self._engine = None

    @property
    def description(self) -> str:
        return f"PostgresSink[{self.table}]"

    def engine(self) -> sa.Engine:
        if self._engine is None:
            self._engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def holds_query(self, query_id: str) -> bool | None:
        """True when the marker table has a batch of this query id for this table."""
        with self.engine().connect() as conn:
            if not sa.inspect(conn).has_table(MARKER):
                return False
            row = execute(conn, sql.SQL("SELECT last_batch_id FROM {} WHERE query_id = %s AND target = %s")
                          .format(_MARKER), (query_id, self.table)).fetchone()
        return row is not None and row[0] >= 0

    def row_count(self) -> int:
        """The target table's rows (count(*))."""
        with self.engine().connect() as conn:
            return int(execute(conn, sql.SQL("SELECT count(*) FROM {}").format(self.target)).fetchone()[0] or 0)

    def foreign_output(self, query_id: str) -> str | None:
        """Marker rows of other query ids for this table (their batches are in it)."""
        with self.engine().connect() as conn:
            if not sa.inspect(conn).has_table(MARKER):
                return None
            others = execute(conn, sql.SQL("SELECT query_id, last_batch_id FROM {} WHERE target = %s "
                                           "AND query_id <> %s AND last_batch_id >= 0 ORDER BY query_id")
                             .format(_MARKER), (self.table, query_id)).fetchall()
        if not others:
            return None
        what = ("each batch replaces the whole table (DELETE, then COPY), their rows included"
                if self.ctx.output_mode == "complete" else
                "this query's batches are added to it (its marker row is keyed by query id and table: none of its "
                "batches is skipped)")
        named = ", ".join(f"query id {q} (batches up to {b})" for q, b in others)
        return f"{self.description} already holds the output of {named}; {what}. Write to a new table to keep them apart."

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        """One transaction: marker check -> rows -> marker = batch_id (module doc)."""
        table = flatten(table)
        self._refuse_nul(batch_id, table)
        keys = list(self.ctx.key_columns)
        mode = self.ctx.output_mode
        if mode == "update" and not keys:
            raise ValueError(f"{self.description}: update mode needs result keys (a group_by); this query has none")
        with self.engine().begin() as conn:
            if self._holds_batch(conn, batch_id):
                return SinkResult(0, version=batch_id, skipped_replay=True)
            self._create(conn, table.schema, keys if mode == "update" else [])
            if mode == "complete":
                execute(conn, sql.SQL("DELETE FROM {}").format(self.target))
            if mode == "update" and table.num_rows:
                self._upsert(conn, table, keys, batch_id)
            elif table.num_rows:
                self._copy(conn, self.target, table)
            self._mark_batch(conn, batch_id)
        return SinkResult(table.num_rows, version=batch_id)

    def _holds_batch(self, conn, batch_id: int) -> bool:
        """In the batch's transaction: lock this query's marker row (serialising two runners of the
        query) and say whether the table already holds batch_id (a redo: write nothing)."""
        execute(conn, sql.SQL("CREATE TABLE IF NOT EXISTS {} (query_id TEXT NOT NULL, target TEXT NOT NULL, "
                              "last_batch_id BIGINT NOT NULL, PRIMARY KEY (query_id, target))").format(_MARKER))
        execute(conn, sql.SQL("INSERT INTO {} VALUES (%s, %s, -1) ON CONFLICT DO NOTHING").format(_MARKER),
                (self.ctx.query_id, self.table))
        (last,) = execute(conn, sql.SQL("SELECT last_batch_id FROM {} WHERE query_id = %s AND target = %s FOR UPDATE")
                          .format(_MARKER), (self.ctx.query_id, self.table)).fetchone()
        return last >= batch_id

    def _mark_batch(self, conn, batch_id: int) -> None:
        """In the batch's transaction, last: the table holds batch_id."""
        execute(conn, sql.SQL("UPDATE {} SET last_batch_id = %s WHERE query_id = %s AND target = %s").format(_MARKER),
                (batch_id, self.ctx.query_id, self.table))

    def _refuse_nul(self, batch_id: int, table: pa.Table) -> None:
        """PostgreSQL text cannot hold a NUL character: SinkSchemaError naming the column, the row
        of the batch's output and its values (before anything is written)."""
        for name in table.column_names:
            col = table.column(name)
            if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
                continue
            hits = pc.match_substring(col, "\x00")
            if not pc.any(hits).as_py():
                continue
            row = int(pc.index(hits, True).as_py())
            values = {k: v for k, v in table.slice(row, 1).to_pylist()[0].items()}
            locate = getattr(self.ctx, "locate", None)
            found = locate(batch_id, [b"\\u0000", b"\x00"]) if locate is not None else None
            where = f" It came from {found}." if found else ""
            raise SinkSchemaError(
                f"{self.description}, batch {batch_id}: column {name!r} of output row {row} holds a NUL character "
                f"(\\x00), which PostgreSQL text cannot store; the row: {values!r}.{where} Nothing of the batch was written. "
                f"Fix the input it came from, or remove the character in the query (e.g. "
                f"with_column({name!r}, \"replace({name}, chr(0), '')\")).")

    def _create(self, conn, schema: pa.Schema, keys: list[str]) -> None:
        cols = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(pg_type(f.type)))
                                  for f in schema)
        pk = sql.SQL("")
        if keys:
            flat = ident_list(self._flat_keys(schema, keys))
            nulls_ok = (conn.dialect.server_version_info or (0,)) >= (15,)
            pk = (sql.SQL(", UNIQUE NULLS NOT DISTINCT ({})") if nulls_ok else sql.SQL(", PRIMARY KEY ({})")).format(flat)
        execute(conn, sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}{})").format(self.target, cols, pk))

    @staticmethod
    def _flat_keys(schema: pa.Schema, keys: list[str]) -> list[str]:
        out = []
        for k in keys:
            out += [n for n in schema.names if n == k or n.startswith(k + "_")] if k not in schema.names else [k]
        return out

    def _copy(self, conn, target: sql.Composable, table: pa.Table) -> None:
        buf = io.BytesIO()
        # one chunk per column: pyarrow 26's CSV writer emits NUL bytes for a column whose first
        # chunk is empty (a concatenation that starts with an empty table), which COPY refuses
        pacsv.write_csv(_csv_ready(table.combine_chunks()), buf, pacsv.WriteOptions(include_header=False))
        raw = conn.connection.driver_connection
        with raw.cursor() as cur:
            with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(target, ident_list(table.column_names))) as cp:
                cp.write(buf.getvalue())

    def _upsert(self, conn, table: pa.Table, keys: list[str], batch_id: int = -1) -> None:
        """Upsert on the keys, null-safely (module doc): ON CONFLICT for the rows without a NULL
        key (the unique index decides), DELETE + INSERT for the others (few: NULL groups)."""
        flat_keys = self._flat_keys(table.schema, keys)
        nulls = [k for k in flat_keys if table.column(k).null_count]
        if nulls:
            self._refuse_not_null_keys(conn, nulls, flat_keys, batch_id)
        stage = sql.Identifier("__inc_upsert")
        execute(conn, sql.SQL("CREATE TEMP TABLE {} (LIKE {}) ON COMMIT DROP").format(stage, self.target))
        self._copy(conn, stage, table)
        cols = ident_list(table.column_names)
        rest = [c for c in table.column_names if c not in flat_keys]
        action = (sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in rest))
            if rest else sql.SQL("DO NOTHING"))
        any_null = sql.SQL(" OR ").join(sql.SQL("{} IS NULL").format(sql.Identifier(k)) for k in flat_keys)
        execute(conn, sql.SQL("INSERT INTO {t} ({c}) SELECT {c} FROM {s} WHERE NOT ({n}) ON CONFLICT ({k}) {a}").format(
            t=self.target, c=cols, s=stage, n=any_null, k=ident_list(flat_keys), a=action))
        if not nulls:
            return
        same = sql.SQL(" AND ").join(sql.SQL("t.{k} IS NOT DISTINCT FROM s.{k}").format(k=sql.Identifier(k))
                                     for k in flat_keys)
        execute(conn, sql.SQL("DELETE FROM {t} AS t USING (SELECT * FROM {s} WHERE {n}) AS s WHERE {m}").format(
            t=self.target, s=stage, n=any_null, m=same))
        execute(conn, sql.SQL("INSERT INTO {t} ({c}) SELECT {c} FROM {s} WHERE {n}").format(
            t=self.target, c=cols, s=stage, n=any_null))

    def _refuse_not_null_keys(self, conn, nulls: list[str], flat_keys: list[str], batch_id: int) -> None:
        """SinkSchemaError when a key column holding a NULL in this batch is NOT NULL in the table
        (a primary key: a table created before PostgreSQL 15 or by hand); the batch's transaction
        is rolled back (add_batch), so nothing of it is written."""
        raw = conn.connection.driver_connection
        strict = {r[0] for r in execute(conn, sql.SQL(
            "SELECT attname FROM pg_attribute WHERE attrelid = CAST(%s AS regclass) AND attnum > 0 AND attnotnull"),
            (self.target.as_string(raw),)).fetchall()}
        bad = [k for k in nulls if k in strict]
        if bad:
            raise SinkSchemaError(
                f"{self.description}, batch {batch_id}: the output has a NULL in key column(s) {bad} (a group whose key is "
                f"NULL, as Spark keeps it), but the table declares them NOT NULL (a primary key), so it cannot hold "
                f"that group. Nothing of the batch was written. Let the table take NULL keys (PostgreSQL 15+: "
                f"replace its primary key by UNIQUE NULLS NOT DISTINCT ({ident_list(flat_keys).as_string(raw)})), or "
                f"filter or coalesce the NULL keys in the query.")

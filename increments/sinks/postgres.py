"""format("postgres"): exactly-once writes to a PostgreSQL table through SQLAlchemy (psycopg 3).

Options: `url` (SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db), `table` (optionally
schema-qualified "schema.table").

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

from ..errors import SinkSchemaError
from ..identifiers import pg_ident, pg_table, pg_text_ident, pg_text_table
from ..options import sink_options
from .base import Sink, SinkResult

MARKER = "increments_sink_batches"


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
    from ..sql import run_sql
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


#: an identifier inside sa.text(): quoted, its colons escaped (a ':x' in a name is no bind parameter)
_q = pg_text_ident


class PostgresSink(Sink):
    def __init__(self, options: dict[str, Any]):
        o = sink_options("postgres", options, "format('postgres')")
        self.url, self.table = o["url"], o["table"]
        if not self.url or not self.table:
            raise ValueError("format('postgres') needs .option('url', 'postgresql+psycopg://...') and "
                             ".option('table', 'name')")
        self.qtable = pg_text_table(self.table)          # in sa.text() statements
        self.driver_table = pg_table(self.table)         # in SQL the driver gets as it is (COPY, regclass)
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
            last = conn.execute(sa.text(f"SELECT last_batch_id FROM {MARKER} WHERE query_id = :q AND target = :t"),
                                {"q": query_id, "t": self.table}).scalar()
        return last is not None and last >= 0

    def foreign_output(self, query_id: str) -> str | None:
        """Marker rows of other query ids for this table (their batches are in it)."""
        with self.engine().connect() as conn:
            if not sa.inspect(conn).has_table(MARKER):
                return None
            others = conn.execute(sa.text(f"SELECT query_id, last_batch_id FROM {MARKER} WHERE target = :t "
                                          "AND query_id <> :q AND last_batch_id >= 0 ORDER BY query_id"),
                                  {"q": query_id, "t": self.table}).all()
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
                conn.execute(sa.text(f"DELETE FROM {self.qtable}"))
            if mode == "update" and table.num_rows:
                self._upsert(conn, table, keys, batch_id)
            elif table.num_rows:
                self._copy(conn, self.driver_table, table)
            self._mark_batch(conn, batch_id)
        return SinkResult(table.num_rows, version=batch_id)

    def _holds_batch(self, conn, batch_id: int) -> bool:
        """In the batch's transaction: lock this query's marker row (serialising two runners of the
        query) and say whether the table already holds batch_id (a redo: write nothing)."""
        conn.execute(sa.text(f"CREATE TABLE IF NOT EXISTS {MARKER} (query_id TEXT NOT NULL, target TEXT NOT NULL, "
                             "last_batch_id BIGINT NOT NULL, PRIMARY KEY (query_id, target))"))
        conn.execute(sa.text(f"INSERT INTO {MARKER} VALUES (:q, :t, -1) ON CONFLICT DO NOTHING"),
                     {"q": self.ctx.query_id, "t": self.table})
        last = conn.execute(sa.text(f"SELECT last_batch_id FROM {MARKER} WHERE query_id = :q AND target = :t "
                                    "FOR UPDATE"), {"q": self.ctx.query_id, "t": self.table}).scalar_one()
        return last >= batch_id

    def _mark_batch(self, conn, batch_id: int) -> None:
        """In the batch's transaction, last: the table holds batch_id."""
        conn.execute(sa.text(f"UPDATE {MARKER} SET last_batch_id = :b WHERE query_id = :q AND target = :t"),
                     {"b": batch_id, "q": self.ctx.query_id, "t": self.table})

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
        cols = ", ".join(f"{_q(f.name)} {pg_type(f.type)}" for f in schema)
        pk = ""
        if keys:
            flat = ", ".join(_q(k) for k in self._flat_keys(schema, keys))
            nulls_ok = (conn.dialect.server_version_info or (0,)) >= (15,)
            pk = f", UNIQUE NULLS NOT DISTINCT ({flat})" if nulls_ok else f", PRIMARY KEY ({flat})"
        conn.execute(sa.text(f"CREATE TABLE IF NOT EXISTS {self.qtable} ({cols}{pk})"))

    @staticmethod
    def _flat_keys(schema: pa.Schema, keys: list[str]) -> list[str]:
        out = []
        for k in keys:
            out += [n for n in schema.names if n == k or n.startswith(k + "_")] if k not in schema.names else [k]
        return out

    def _copy(self, conn, qtable: str, table: pa.Table) -> None:
        buf = io.BytesIO()
        # one chunk per column: pyarrow 26's CSV writer emits NUL bytes for a column whose first
        # chunk is empty (a concatenation that starts with an empty table), which COPY refuses
        pacsv.write_csv(_csv_ready(table.combine_chunks()), buf, pacsv.WriteOptions(include_header=False))
        cols = ", ".join(pg_ident(c) for c in table.column_names)
        raw = conn.connection.driver_connection
        with raw.cursor() as cur:
            with cur.copy(f"COPY {qtable} ({cols}) FROM STDIN WITH (FORMAT csv)") as cp:
                cp.write(buf.getvalue())

    def _upsert(self, conn, table: pa.Table, keys: list[str], batch_id: int = -1) -> None:
        """Upsert on the keys, null-safely (module doc): ON CONFLICT for the rows without a NULL
        key (the unique index decides), DELETE + INSERT for the others (few: NULL groups)."""
        flat_keys = self._flat_keys(table.schema, keys)
        nulls = [k for k in flat_keys if table.column(k).null_count]
        if nulls:
            self._refuse_not_null_keys(conn, nulls, flat_keys, batch_id)
        conn.execute(sa.text(f"CREATE TEMP TABLE __inc_upsert (LIKE {self.qtable}) ON COMMIT DROP"))
        self._copy(conn, "__inc_upsert", table)
        cols = ", ".join(_q(c) for c in table.column_names)
        sets = ", ".join(f"{_q(c)} = EXCLUDED.{_q(c)}" for c in table.column_names if c not in flat_keys)
        action = f"DO UPDATE SET {sets}" if sets else "DO NOTHING"
        any_null = " OR ".join(f"{_q(k)} IS NULL" for k in flat_keys)
        conn.execute(sa.text(f"INSERT INTO {self.qtable} ({cols}) SELECT {cols} FROM __inc_upsert "
                             f"WHERE NOT ({any_null}) ON CONFLICT ({', '.join(_q(k) for k in flat_keys)}) {action}"))
        if not nulls:
            return
        same = " AND ".join(f"t.{_q(k)} IS NOT DISTINCT FROM s.{_q(k)}" for k in flat_keys)
        conn.execute(sa.text(f"DELETE FROM {self.qtable} AS t USING (SELECT * FROM __inc_upsert WHERE {any_null}) "
                             f"AS s WHERE {same}"))
        conn.execute(sa.text(f"INSERT INTO {self.qtable} ({cols}) SELECT {cols} FROM __inc_upsert WHERE {any_null}"))

    def _refuse_not_null_keys(self, conn, nulls: list[str], flat_keys: list[str], batch_id: int) -> None:
        """SinkSchemaError when a key column holding a NULL in this batch is NOT NULL in the table
        (a primary key: a table created before PostgreSQL 15 or by hand); the batch's transaction
        is rolled back (add_batch), so nothing of it is written."""
        strict = set(conn.execute(sa.text(
            "SELECT attname FROM pg_attribute WHERE attrelid = CAST(:t AS regclass) AND attnum > 0 AND attnotnull"),
            {"t": self.driver_table}).scalars())
        bad = [k for k in nulls if k in strict]
        if bad:
            raise SinkSchemaError(
                f"{self.description}, batch {batch_id}: the output has a NULL in key column(s) {bad} (a group whose key is "
                f"NULL, as Spark keeps it), but the table declares them NOT NULL (a primary key), so it cannot hold "
                f"that group. Nothing of the batch was written. Let the table take NULL keys (PostgreSQL 15+: "
                f"replace its primary key by UNIQUE NULLS NOT DISTINCT ({', '.join(_q(k) for k in flat_keys)})), or "
                f"filter or coalesce the NULL keys in the query.")

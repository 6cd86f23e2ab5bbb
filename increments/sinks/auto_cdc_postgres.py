"""AUTO CDC into PostgreSQL: `write_stream.apply_changes(...).format("postgres")` with options
`url` and `table`, as format("postgres") takes them.

The sink applies the actions operators/apply_changes.py emits (target columns, `__start_at` /
`__end_at` for SCD type 2, `__action`; struct columns flattened to <name>_<field> as the postgres
sink does) in ONE transaction per batch:

    lock this query's marker row; a batch id <= the marker is already applied: write nothing
    create the table on the first batch (no primary key: NULL keys are allowed and match NULL
        keys), with an index on the keys (+ __start_at for type 2)
    COPY the actions into a temporary table
    DELETE the target rows whose identity (keys IS NOT DISTINCT FROM, and __start_at) has an action
    INSERT the upserts
    marker = batch id

Readers never see a half-applied batch (one transaction); a crash before the commit leaves
nothing; a redo after it is skipped by the marker: each action is applied once.
"""
from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
from psycopg import sql

from ..operators.apply_changes import ACTION, START
from .auto_cdc import action_counts
from .base import SinkResult
from .postgres import PostgresSink, execute, flatten, ident_list


class AutoCdcPostgresSink(PostgresSink):
    supported_modes = ("append",)

    def __init__(self, options: dict[str, Any], scd_type: int, keys: list[str]):
        super().__init__(options)
        self.scd_type, self.keys = scd_type, list(keys)

    @property
    def description(self) -> str:
        return f"AutoCdcPostgres[scd{self.scd_type}, {self.table}]"

    def _identity(self, schema: pa.Schema) -> list[str]:
        cols = self._flat_keys(schema, self.keys)
        if self.scd_type == 2:
            cols += self._flat_keys(schema, [START])
        return cols

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        """One transaction: marker check -> delete the identities -> insert the upserts -> marker."""
        counts = action_counts(table)
        flat = flatten(table)
        self._refuse_nul(batch_id, flat)
        rows = flat.drop_columns([ACTION])
        ident = self._identity(rows.schema)
        with self.engine().begin() as conn:
            if self._holds_batch(conn, batch_id):
                return SinkResult(0, version=batch_id, skipped_replay=True)
            self._create(conn, rows.schema, [])
            index = "inc_cdc_" + hashlib.md5(f"{self.table}:{ident}".encode()).hexdigest()[:16]
            execute(conn, sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                sql.Identifier(index), self.target, ident_list(ident)))
            if flat.num_rows:
                stage, action = sql.Identifier("__inc_cdc"), sql.Identifier(ACTION)
                execute(conn, sql.SQL("CREATE TEMP TABLE {} (LIKE {}) ON COMMIT DROP").format(stage, self.target))
                execute(conn, sql.SQL("ALTER TABLE {} ADD COLUMN {} TEXT").format(stage, action))
                self._copy(conn, stage, flat)
                match = sql.SQL(" AND ").join(sql.SQL("t.{c} IS NOT DISTINCT FROM s.{c}").format(c=sql.Identifier(c))
                                              for c in ident)
                execute(conn, sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE {}").format(self.target, stage, match))
                cols = ident_list(rows.column_names)
                execute(conn, sql.SQL("INSERT INTO {t} ({c}) SELECT {c} FROM {s} WHERE {a} = 'upsert'").format(
                    t=self.target, c=cols, s=stage, a=action))
            self._mark_batch(conn, batch_id)
        return SinkResult(table.num_rows, version=batch_id, extra=counts)

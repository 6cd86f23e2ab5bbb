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
import sqlalchemy as sa

from ..operators.apply_changes import ACTION, START
from .auto_cdc import action_counts
from .base import SinkResult
from .postgres import PostgresSink, _q, flatten


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
            conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {_q(index)} ON {self.qtable} "
                                 f"({', '.join(_q(c) for c in ident)})"))
            if flat.num_rows:
                conn.execute(sa.text(f"CREATE TEMP TABLE __inc_cdc (LIKE {self.qtable}) ON COMMIT DROP"))
                conn.execute(sa.text(f"ALTER TABLE __inc_cdc ADD COLUMN {_q(ACTION)} TEXT"))
                self._copy(conn, "__inc_cdc", flat)
                match = " AND ".join(f"t.{_q(c)} IS NOT DISTINCT FROM s.{_q(c)}" for c in ident)
                conn.execute(sa.text(f"DELETE FROM {self.qtable} AS t USING __inc_cdc AS s WHERE {match}"))
                cols = ", ".join(_q(c) for c in rows.column_names)
                conn.execute(sa.text(f"INSERT INTO {self.qtable} ({cols}) SELECT {cols} FROM __inc_cdc "
                                     f"WHERE {_q(ACTION)} = 'upsert'"))
            self._mark_batch(conn, batch_id)
        return SinkResult(table.num_rows, version=batch_id, extra=counts)

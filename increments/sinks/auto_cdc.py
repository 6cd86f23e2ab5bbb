"""AUTO CDC into Delta: `write_stream.apply_changes(...).format("delta").start(path)`.

The sink applies the actions operators/apply_changes.py emits (target columns, `__start_at` /
`__end_at` for SCD type 2, `__action` "upsert" | "delete"; at most one action per target row
identity: the keys, and `__start_at` for type 2) in ONE Delta commit per batch:

    no table yet: create it with the upserts, also none (write, mode append; options `table_properties`
                  (e.g. {"delta.enableChangeDataFeed": "true"} so another query can read the
                  table's change feed) and `partition_by` apply here)
    else:         MERGE ON keys IS NOT DISTINCT FROM (NULL keys match NULL keys) [AND __start_at]
                  WHEN MATCHED AND delete -> DELETE; WHEN MATCHED AND upsert -> UPDATE every column;
                  WHEN NOT MATCHED AND upsert -> INSERT

Exactly once: the commit carries the Delta app transaction (app_id = query id, version = batch id),
atomically with the rows. Recovery rule: a batch whose id is <= the table's transaction version
for the query is already applied (a redo after a crash between this commit and commits[N]) and
nothing is written. The sink keeps its own snapshot of the table between batches (one load per
open); a commit refused because the snapshot is stale (another writer committed) reloads, checks
the transaction again and retries once, as the Delta sink does.
"""
from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .. import storage
from ..errors import SinkSchemaError
from ..operators.apply_changes import ACTION, START
from .base import Sink, SinkContext, SinkResult
from .delta import commit_properties, open_table, post_commit_hooks, schema_difference


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def action_counts(table: pa.Table) -> dict[str, int]:
    """{"upserted": n, "deleted": n} of an action table (the sink's result extra, for progress)."""
    ups = int(pc.sum(pc.equal(table.column(ACTION), "upsert")).as_py() or 0) if table.num_rows else 0
    return {"rows_upserted": ups, "rows_deleted": table.num_rows - ups}


class AutoCdcDeltaSink(Sink):
    supported_modes = ("append",)

    def __init__(self, path: str | None, options: dict[str, Any], scd_type: int, keys: list[str]):
        if not path:
            raise ValueError("apply_changes(...).format('delta') needs a table path: .start('lake/silver/customers')")
        path = os.fspath(path)
        self.path = path.rstrip("/") if storage.scheme_of(path) else os.path.abspath(path)
        self.scd_type, self.keys = scd_type, list(keys)
        pb = options.get("partition_by")
        self.partition_by = [c.strip() for c in pb.split(",")] if isinstance(pb, str) else (list(pb) if pb else None)
        self.table_properties = {str(k): str(v) for k, v in dict(options.get("table_properties") or {}).items()}
        self.own_storage_options = dict(options.get("storage_options") or {})
        storage.remember_secrets(self.own_storage_options)
        self.storage_options: dict | None = self.own_storage_options or None

    @property
    def description(self) -> str:
        return f"AutoCdcDelta[scd{self.scd_type}, {storage.redact_url(self.path)}]"

    def open(self, ctx: SinkContext) -> None:
        storage.check_scheme(self.path, "apply_changes format('delta') path")
        super().open(ctx)
        self.storage_options = {**(ctx.storage_options or {}), **self.own_storage_options} or None
        self._dt: Any = None
        self._done: int | None = None

    def holds_query(self, query_id: str) -> bool | None:
        dt = open_table(self.path, self.storage_options)
        return dt is not None and dt.transaction_version(query_id) is not None

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        """One commit per batch, skipped when the table holds it (module doc)."""
        counts = action_counts(table)
        dt, fresh = self._snapshot()
        while True:
            if self._done is not None and self._done >= batch_id:
                return SinkResult(0, version=dt.version(), skipped_replay=True)
            if table.num_rows == 0 and dt is not None:
                return SinkResult(0, version=dt.version(), extra=counts)
            try:
                self._commit(dt, batch_id, table)
                break
            except Exception as e:  # noqa: BLE001 - a stale snapshot: reload, check again, retry once
                if not fresh:
                    self._dt = None
                    dt, fresh = self._snapshot()
                    continue
                self._explain(dt, batch_id, table, e)
                raise
        if dt is None:
            self._dt = open_table(self.path, self.storage_options)
        self._done = batch_id
        return SinkResult(table.num_rows, version=self._dt.version(), extra=counts)

    def _snapshot(self) -> tuple[Any, bool]:
        if self._dt is not None:
            return self._dt, False
        self._dt = open_table(self.path, self.storage_options)
        v = self._dt.transaction_version(self.ctx.query_id) if self._dt is not None else None
        self._done = None if v is None else int(v)
        return self._dt, True

    def _commit(self, dt: Any, batch_id: int, table: pa.Table) -> None:
        from deltalake import write_deltalake
        props = commit_properties(self.ctx.query_id, batch_id)
        rows = table.drop_columns([ACTION])
        if dt is None:
            ups = rows.filter(pc.equal(table.column(ACTION), "upsert"))
            write_deltalake(self.path, ups, mode="append", partition_by=self.partition_by,
                            configuration=self.table_properties or None, commit_properties=props,
                            storage_options=self.storage_options)
            return
        match = [f"(t.{_q(k)} IS NOT DISTINCT FROM s.{_q(k)})" for k in self.keys]
        if self.scd_type == 2:
            match.append(f"(t.{_q(START)} = s.{_q(START)})")
        cols = {c: f"s.{_q(c)}" for c in rows.column_names}
        (dt.merge(table, " AND ".join(match), source_alias="s", target_alias="t", commit_properties=props,
                  post_commithook_properties=post_commit_hooks(dt))
           .when_matched_delete(predicate=f"s.{_q(ACTION)} = 'delete'")
           .when_matched_update(updates=cols, predicate=f"s.{_q(ACTION)} = 'upsert'")
           .when_not_matched_insert(updates=cols, predicate=f"s.{_q(ACTION)} = 'upsert'")
           .execute())

    def _explain(self, dt: Any, batch_id: int, table: pa.Table, e: Exception) -> None:
        """A failed commit on a fresh snapshot: name a schema mismatch when there is one."""
        if dt is None:
            return
        diff = schema_difference(pa.schema(dt.schema().to_arrow()), table.drop_columns([ACTION]).schema)
        if diff:
            raise SinkSchemaError(
                f"{self.description}, batch {batch_id}: the table's schema does not fit the changes applied to it "
                f"({'; '.join(diff)}). Nothing of the batch was written. Write to a new table (with a new "
                f"checkpoint), or change the query's columns to the table's. [{storage.redact(str(e))}]") from None

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
nothing is written. The sink keeps the Delta sink's own snapshot of the table between batches (one
load per open); a commit refused because the snapshot is stale (another writer committed) reloads,
checks the transaction again and retries once, as the Delta sink does.
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake

from .. import storage
from ..errors import SinkSchemaError
from ..identifiers import delta_ident
from ..operators.apply_changes import ACTION, START
from .base import SinkResult
from .delta import DeltaSink, commit_properties, post_commit_hooks, schema_difference


_q = delta_ident      # a column in a delta-rs predicate (increments/identifiers.py)


def action_counts(table: pa.Table) -> dict[str, int]:
    """{"upserted": n, "deleted": n} of an action table (the sink's result extra, for progress)."""
    ups = int(pc.sum(pc.equal(table.column(ACTION), "upsert")).as_py() or 0) if table.num_rows else 0
    return {"rows_upserted": ups, "rows_deleted": table.num_rows - ups}


class AutoCdcDeltaSink(DeltaSink):
    """The Delta sink's table, snapshot and app transaction (sinks/delta.py), with one MERGE of the
    actions per batch in place of its output modes."""
    supported_modes = ("append",)

    def __init__(self, path: str | None, options: dict[str, Any], scd_type: int, keys: list[str]):
        if not path:
            raise ValueError("apply_changes(...).format('delta') needs a table path: .start('lake/silver/customers')")
        super().__init__(path, options)
        self.scd_type, self.keys = scd_type, list(keys)

    @property
    def description(self) -> str:
        return f"AutoCdcDelta[scd{self.scd_type}, {storage.redact_url(self.path)}]"

    def _nothing_to_write(self, dt: Any, table: pa.Table) -> SinkResult | None:
        """No actions: nothing to commit, once the table exists (the first batch creates it)."""
        if table.num_rows == 0 and dt is not None:
            return SinkResult(0, version=dt.version(), extra=action_counts(table))
        return None

    def _result_extra(self, table: pa.Table) -> dict[str, Any]:
        return action_counts(table)

    def _commit(self, dt: Any, batch_id: int, table: pa.Table) -> None:
        props = commit_properties(self.ctx.query_id, batch_id, self.ctx.query_name)
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

    def _explain_failed_commit(self, dt: Any, batch_id: int, table: pa.Table, e: Exception) -> None:
        """A failed commit on a fresh snapshot: name a schema mismatch when there is one."""
        if dt is None:
            return
        diff = schema_difference(pa.schema(dt.schema().to_arrow()), table.drop_columns([ACTION]).schema)
        if diff:
            raise SinkSchemaError(
                f"{self.description}, batch {batch_id}: the table's schema does not fit the changes applied to it "
                f"({'; '.join(diff)}). Nothing of the batch was written. Write to a new table (with a new "
                f"checkpoint), or change the query's columns to the table's. [{storage.redact(str(e))}]") from None

"""format("iceberg"): exactly-once writes to an Apache Iceberg table through pyiceberg.

    .format("iceberg").option("catalog", {...pyiceberg catalog properties}).start("namespace.table")

(the catalog: sinks/iceberg_table.py; options: `catalog` (a dict, or its JSON text),
`partition_by` (comma-separated columns, identity partitions, used when the sink creates the
table), `storage_options`). The table is created on the first batch from the output schema (its
namespace too), with every column optional.

Each batch is ONE catalog commit holding ONE snapshot whose summary carries
`increments.query-id`, `increments.batch-id` and `increments.query-name`, and, in the same
commit, the table property `increments.last-batch-id.<query id>` = N (the marker: it survives
snapshot expiry, which a summary does not). Recovery rule: before writing batch N the sink reads
the marker; N or more means the batch is in the table (a redo after a crash between the commit and
commits[N]): nothing is written. The commit carries the requirement that the marker is still what
the sink read (iceberg_table.marker_requirement), so two runs of one query cannot both commit N;
the loser reloads the table, finds N and skips.

- append: a fast-append snapshot of the batch's rows (an empty batch, append or update, writes nothing).
- update: one OVERWRITE snapshot, copy-on-write on the result keys (SinkContext.key_columns): the
  data files that may hold a key of the batch (pruned with IN filters on the keys) are rewritten
  without the batch's keys (NULL-safe equality, struct keys such as `window` included), and the
  batch's rows are added. Without keys the sink refuses update mode.
- complete: one OVERWRITE snapshot replacing every data file by the result (also when empty).
Schema: the output must fit the table (checked as the Delta sink checks, columns named) before
anything is written; a mismatch raises SinkSchemaError. `add_batch` returns the snapshot id
(SinkResult.version) for lineage.
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, ValidationException
from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError
from pyiceberg.expressions import AlwaysTrue, And, In
from pyiceberg.io.pyarrow import ArrowScan

from .. import storage
from ..errors import SinkSchemaError
from ..options import sink_options
from ..sql import quote_ident, run_sql
from . import iceberg_table as I
from .base import Sink, SinkContext, SinkResult
from .delta import schema_difference


class IcebergSink(Sink):
    def __init__(self, name: str | None, options: dict[str, Any] | None = None):
        o = sink_options("iceberg", options, "format('iceberg')")
        name = name or o["table"]
        if not name:
            raise ValueError("format('iceberg') needs a table: .start('namespace.table')")
        self.name = str(name)
        self.namespace, self.table_name = I.identifier(self.name, "format('iceberg')")
        self.catalog_conf = dict(o["catalog"] or {})
        self.partition_by = o["partition_by"] or []
        self.own_storage_options = dict(o["storage_options"] or {})
        storage.remember_secrets(self.catalog_conf)
        storage.remember_secrets(self.own_storage_options)

    @property
    def description(self) -> str:
        return f"IcebergSink[{self.name}]"

    def open(self, ctx: SinkContext) -> None:
        super().open(ctx)
        self.props = I.catalog_properties(self.catalog_conf, getattr(ctx, "log_url", None),
                                          {**(ctx.storage_options or {}), **self.own_storage_options})
        self._tbl: Any = None

    def catalog(self):
        return I.load_catalog(self.props, self.description)

    def _load(self):
        try:
            return self.catalog().load_table((*self.namespace, self.table_name))
        except NoSuchTableError:
            return None

    def holds_query(self, query_id: str) -> bool | None:
        t = self._load()
        return t is not None and I.MARKER_PREFIX + query_id in t.properties

    def foreign_output(self, query_id: str) -> str | None:
        """The table holds snapshots and no marker of this query id: other writers' (other queries'
        markers named with their last batch ids)."""
        t = self._load()
        if t is None or I.MARKER_PREFIX + query_id in t.properties or t.current_snapshot() is None:
            return None
        others = sorted((k[len(I.MARKER_PREFIX):], v) for k, v in t.properties.items() if k.startswith(I.MARKER_PREFIX))
        named = (", ".join(f"query id {q} (batches up to {b})" for q, b in others) if others else "other writers")
        what = ("each batch replaces the whole table, their rows included" if self.ctx.output_mode == "complete"
                else "this query's batches are added to it (its marker, table property "
                     f"{I.MARKER_PREFIX}{query_id}, is keyed by its query id: none of its batches is skipped)")
        return (f"{self.description} already holds snapshot {t.current_snapshot().snapshot_id} with the output of "
                f"{named}; {what}. Write to a new table to keep them apart.")

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        """Module doc: skip what the marker holds, else one commit (retried after a concurrent
        commit of another writer, the marker checked again)."""
        mode = self.ctx.output_mode
        if mode == "update" and not self.ctx.key_columns:
            raise ValueError(f"{self.description}: update mode needs result keys (a group_by); this query has none")
        for attempt in range(5):
            t = self._tbl if self._tbl is not None else self._load()
            if t is None:
                if mode == "append" and table.num_rows == 0:
                    return SinkResult(0)
                t = self._create(table.schema)
            done = t.properties.get(I.MARKER_PREFIX + self.ctx.query_id)
            if done is not None and int(done) >= batch_id:
                self._tbl = t
                return SinkResult(0, version=_snapshot_id(t), skipped_replay=True)
            if mode != "complete" and table.num_rows == 0:
                self._tbl = t
                return SinkResult(0, version=_snapshot_id(t))
            self._check_schema(t, batch_id, table.schema)
            try:
                self._commit(t, batch_id, table, done)
            except (CommitFailedException, ValidationException):
                self._tbl = None                # another writer committed (or compacted the files an update
                                                # rewrites): reload and check again
                if attempt == 4:
                    raise
                continue
            self._tbl = t                       # the commit moved `t` to the metadata it wrote
            return SinkResult(table.num_rows, version=_snapshot_id(t), extra={"iceberg_snapshot_id": _snapshot_id(t)})
        raise AssertionError("unreachable")

    def _create(self, schema: pa.Schema):
        cat = self.catalog()
        try:
            cat.create_namespace(self.namespace)
        except NamespaceAlreadyExistsError:
            pass
        schema = pa.schema([pa.field(f.name, f.type, True) for f in schema])
        try:
            t = cat.create_table((*self.namespace, self.table_name), schema=schema)
        except TableAlreadyExistsError:
            return self._load()
        except ValueError as e:
            if "location" not in str(e) or "warehouse" in self.props:
                raise
            raise ValueError(f"{self.description}: cannot create the table: the catalog has no 'warehouse' (where "
                             "new tables live): add e.g. 'warehouse': 's3://bucket/warehouse' or 'file:///data/wh' "
                             "to the catalog option") from None
        if self.partition_by:
            with t.update_spec() as spec:
                for col in self.partition_by:
                    spec.add_identity(col)
        return t

    def _check_schema(self, t: Any, batch_id: int, output: pa.Schema) -> None:
        diff = schema_difference(I.arrow_schema(t), output)
        if diff:
            raise SinkSchemaError(
                f"{self.description}, batch {batch_id}: the table's schema does not fit this query's output "
                f"({'; '.join(diff)}). Nothing of the batch was written. Change the table's schema (an Iceberg schema "
                "update), change the query to write those columns, or write to a new table (with a new checkpoint).")

    def _commit(self, t: Any, batch_id: int, table: pa.Table, done: str | None) -> None:
        qid = self.ctx.query_id
        props = {I.SUMMARY_QUERY: qid, I.SUMMARY_BATCH: str(batch_id), "increments.query-name": self.ctx.query_name}
        table = table.cast(pa.schema([pa.field(f.name, f.type, True) for f in table.schema]))
        with t.transaction() as tx:
            I.add_requirement(tx, I.marker_requirement(qid, done))
            mode = self.ctx.output_mode
            if mode == "append":
                tx.append(table, snapshot_properties=props)
            else:
                with tx.update_snapshot(snapshot_properties=props).overwrite() as snap:
                    for old, keep in self._replaced(t, table, mode):
                        snap.delete_data_file(old)
                        for f in I.write_files(tx, t, keep):
                            snap.append_data_file(f)
                    for f in I.write_files(tx, t, table):
                        snap.append_data_file(f)
            tx.set_properties({I.MARKER_PREFIX + qid: str(batch_id)})

    def _replaced(self, t: Any, table: pa.Table, mode: str):
        """(data file, its rows to keep) for every data file the batch replaces: all of them in
        complete mode; in update mode the files holding one of the batch's keys, minus those keys."""
        if t.current_snapshot() is None:
            return
        if mode == "complete":
            for task in t.scan().plan_files():
                yield task.file, pa.table({})
            return
        keys = list(self.ctx.key_columns)
        on = " AND ".join(f"o.{quote_ident(k)} IS NOT DISTINCT FROM n.{quote_ident(k)}" for k in keys)
        new_keys = table.select(keys)
        for task in t.scan(row_filter=_key_filter(table, keys)).plan_files():
            old = _read_task(t, task)
            keep = run_sql(f"SELECT o.* FROM old o ANTI JOIN new n ON {on}", {"old": old, "new": new_keys})
            if keep.num_rows < old.num_rows:
                yield task.file, keep.cast(old.schema)


def _snapshot_id(t: Any) -> int | None:
    s = t.current_snapshot() if t is not None else None
    return None if s is None else int(s.snapshot_id)


def _read_task(t: Any, task: Any) -> pa.Table:
    return ArrowScan(table_metadata=t.metadata, io=t.io, projected_schema=t.schema(),
                     row_filter=AlwaysTrue()).to_table(tasks=[task])


def _key_filter(table: pa.Table, keys: list[str]):
    """A filter matching at least every row with one of the batch's keys (IN per key column, per
    field of a struct key), for pruning the files an update rewrites; AlwaysTrue where a column
    holds NULLs or a type IN cannot take."""
    out: Any = AlwaysTrue()
    for k in keys:
        col = table.column(k)
        leaves = ([(f"{k}.{f.name}", col.combine_chunks().field(i)) for i, f in enumerate(col.type)]
                  if pa.types.is_struct(col.type) else [(k, col)])
        for name, arr in leaves:
            if arr.null_count or not (pa.types.is_integer(arr.type) or pa.types.is_string(arr.type)
                                      or pa.types.is_large_string(arr.type) or pa.types.is_timestamp(arr.type)
                                      or pa.types.is_date(arr.type)):
                continue
            values = set(arr.to_pylist())
            if values:
                out = And(out, In(name, values))
    return out

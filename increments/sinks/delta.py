"""format("delta"): exactly-once writes to a Delta table (deltalake).

Every commit carries the Delta app transaction (app_id = query id, version = batch id), written
atomically with the data. Recovery rule: before writing batch N the sink reads the table's
transaction version for the query; if it is >= N the batch is already in the table (a redo after a
crash between the sink commit and commits[N]) and nothing is written.

- append: one append commit per batch (an empty batch writes nothing).
- update: one MERGE on the result keys (SinkContext.key_columns): matched rows are replaced,
  others inserted. Without keys the sink refuses update mode.
- complete: one overwrite commit with the whole result (also when it is empty).

`add_batch` returns the table version it wrote (or the current one on a skipped replay) for lineage.
Options: `partition_by` (comma-separated columns) and `table_properties` (a dict of Delta table
properties, e.g. {"delta.enableChangeDataFeed": "true"}), both used when the sink creates the table;
`storage_options`.

Where: a local path or a URL (s3://, gs://, az://, abfss://, file://); an unknown scheme is refused
at open(). Every deltalake call gets the storage_options: the sink's own over the query-level ones
(SinkContext.storage_options). On S3 delta-rs (>= 1.0) commits with conditional puts
(If-None-Match), so concurrent writers cannot overwrite each other's commit without a lock table.
"""
from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from .. import storage
from ..errors import SinkSchemaError
from ..identifiers import delta_ident
from ..options import sink_options
from ..sources.delta_files import conform, file_location, read_parquet
from .base import Sink, SinkContext, SinkResult


def commit_properties(app_id: str, batch_id: int, query_name: str | None = None):
    """The app transaction (app_id, batch_id); with `query_name`, the commitInfo also names the
    query and batch (increments.query, increments.query_id, increments.batch_id), so a downstream
    query's lineage can name the batches it read (execution/lineage.py)."""
    meta = ({"increments.query": str(query_name), "increments.query_id": str(app_id),
             "increments.batch_id": str(int(batch_id))} if query_name else None)
    return CommitProperties(app_transactions=[Transaction(app_id=app_id, version=int(batch_id))], custom_metadata=meta)


def open_table(path: str, storage_options: dict | None = None):
    """The Delta table at `path`, or None when there is none yet. (Not DeltaTable.is_deltatable:
    it holds the GIL while it waits on the store, which stalls an object store served in-process.)"""
    try:
        return DeltaTable(path, storage_options=storage_options)
    except TableNotFoundError:
        return None


def read_table(path: str, storage_options: dict | None = None):
    """(the Delta table at `path` as a pyarrow Table of its schema, its version).

    The snapshot's data files (its add actions) are read through increments.storage into Arrow
    memory and decoded by pyarrow on this thread, partition values added from the actions. Not
    DeltaTable.to_pyarrow_table(): that scans through a Python filesystem (deltalake's
    DeltaStorageHandler), so Arrow's IO threads hold Python buffers (arrow::py::PyBuffer) after the
    read returns; one released while the interpreter exits calls PyGILState_Ensure, which ends the
    thread with pthread_exit, and unwinding through the noexcept destructor calls std::terminate:
    the process aborts (SIGABRT, exit 134, "terminate called without an active exception") after a
    good run, in about one exit in six here (pyarrow 26.0.1, deltalake 1.6, Python 3.11; with or
    without pre-buffering; see tests/sinks/test_delta_exit.py). Not deltalake's QueryBuilder either:
    it holds the GIL while it waits on the store (an object store served in-process stalls).
    Tables with deletion vectors or column mapping are refused, as deltalake's pyarrow reader does."""
    dt = DeltaTable(path, storage_options=storage_options)
    features = set(dt.protocol().reader_features or [])
    if features & {"deletionVectors", "columnMapping"}:
        raise ValueError(f"read.delta({storage.redact_url(path)!r}): the table uses {sorted(features)}, which this "
                         "reader does not support")
    schema = pa.schema(dt.schema().to_arrow())
    actions = pa.table(dt.get_add_actions(flatten=True))
    keep = [c for c in actions.column_names if c == "path" or c.startswith("partition.")]
    loc = storage.location(path, storage_options)
    tables = []
    for add in actions.select(keep).to_pylist():
        where, name = file_location(loc, add["path"], storage_options)
        parts = {k[len("partition."):]: v for k, v in add.items() if k.startswith("partition.")}
        tables.append(pa.Table.from_arrays(conform(read_parquet(where, name), schema, parts), schema=schema))
    return (pa.concat_tables(tables) if tables else schema.empty_table()), dt.version()


def transaction_version(path: str, app_id: str, storage_options: dict | None = None) -> int | None:
    """The last batch id committed by `app_id` into the Delta table at `path` (None: none, or no table)."""
    dt = open_table(path, storage_options)
    v = dt.transaction_version(app_id) if dt is not None else None
    return None if v is None else int(v)


def append_once(path: str, table: pa.Table, app_id: str, batch_id: int, storage_options: dict | None = None,
                **write_kw: Any) -> bool:
    """Append `table` to the Delta table at `path` in one commit carrying the app transaction
    (app_id, batch_id), unless the table already holds that transaction at or past batch_id (a
    redo); True when it wrote. The exactly-once rule of the side tables (dead letters, late rows)."""
    dt = open_table(path, storage_options)
    if dt is not None:
        done = dt.transaction_version(app_id)
        if done is not None and int(done) >= batch_id:
            return False
    write_deltalake(path, table, mode="append", commit_properties=commit_properties(app_id, batch_id),
                    storage_options=storage_options, **write_kw)
    return True


_quote = delta_ident      # a column in a delta-rs predicate (increments/identifiers.py)


class DeltaSink(Sink):
    def __init__(self, path: str | None, options: dict[str, Any] | None = None):
        if not path:
            raise ValueError("format('delta') needs a table path: .start('lake/gold/table')")
        path = os.fspath(path)
        self.path = path.rstrip("/") if storage.scheme_of(path) else os.path.abspath(path)
        o = sink_options("delta", options, "format('delta')")
        self.partition_by = o["partition_by"]
        #: Delta table properties set when the sink creates the table ({"delta.enableChangeDataFeed": "true"})
        self.table_properties = {str(k): str(v) for k, v in (o["table_properties"] or {}).items()}
        self.own_storage_options = dict(o["storage_options"] or {})
        storage.remember_secrets(self.own_storage_options)
        self.storage_options: dict | None = self.own_storage_options or None

    @property
    def description(self) -> str:
        return f"DeltaSink[{storage.redact_url(self.path)}]"

    def open(self, ctx: SinkContext) -> None:
        """Refuses an unknown scheme; merges the sink's storage_options over the query's; forgets the
        snapshot of an earlier open (another query id, or a restart)."""
        storage.check_scheme(self.path, "format('delta') path")
        super().open(ctx)
        self.storage_options = {**(getattr(ctx, "storage_options", None) or {}), **self.own_storage_options} or None
        self._dt: Any = None           # the sink's snapshot of the table (_snapshot), per open (per query id)
        self._done: int | None = None  # the query's last batch id in it

    def _table(self):
        return open_table(self.path, self.storage_options)

    def holds_query(self, query_id: str) -> bool | None:
        """True when the table holds a commit of this query id (its app transaction)."""
        dt = self._table()
        return dt is not None and dt.transaction_version(query_id) is not None

    def foreign_output(self, query_id: str) -> str | None:
        """The table exists with commits but none of this query id (app transaction): other writers'."""
        dt = self._table()
        if dt is None or dt.transaction_version(query_id) is not None:
            return None
        what = ("each batch replaces the whole table, their rows included" if self.ctx.output_mode == "complete"
                else "this query's batches are added to it (its app transaction is keyed by its query id and "
                     "batch id: none of its batches is skipped)")
        return (f"{self.description} already holds table version {dt.version()} written by other writers (no commit "
                f"of this query id, {query_id}); {what}. Write to a new path to keep them apart.")

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        """See the module doc: skip when the table holds this query's batch, else one commit.

        The check uses the sink's own snapshot of the table (loaded once, then moved forward by its
        own commits), not a fresh read of the log per batch: the query's last batch id in the table
        is what this sink last wrote, unless another writer of the same query id (a zombie run, or
        the run this one replaced) committed since. Such a commit cannot go unseen: delta-rs
        refuses a commit when a commit made after its snapshot carries a transaction of the same
        app id ("Concurrent transaction failed"), so the write fails, and the sink then reloads
        the table, checks again (skipping the batch if the other writer already wrote it) and
        writes once more on the current snapshot. Commits of other writers (other app ids) are
        handled by delta-rs' conflict checker as for any Delta writer."""
        dt, done, fresh = self._snapshot()
        while True:
            if done is not None and done >= batch_id:
                return SinkResult(0, version=dt.version(), skipped_replay=True)
            idle = self._nothing_to_write(dt, table)
            if idle is not None:
                return idle
            retyped = self._retyped(dt, table)
            if retyped:
                if not fresh:                 # decided on the current table, not the sink's snapshot
                    self._dt = None
                    dt, done, fresh = self._snapshot()
                    continue
                raise self._drift(batch_id, retyped)
            try:
                self._commit(dt, batch_id, table)
                break
            except Exception as e:  # noqa: BLE001 - a stale snapshot: reload, check again, retry once
                if not fresh:
                    self._dt = None
                    dt, done, fresh = self._snapshot()
                    continue
                self._explain_failed_commit(dt, batch_id, table, e)
                raise
        if dt is None:
            self._dt = self._table()              # the table this batch created: one full load, once
        # (a write or MERGE through dt moves dt to the version it committed: no request)
        self._done = batch_id
        return SinkResult(table.num_rows, version=self._dt.version(), extra=self._result_extra(table))

    def _nothing_to_write(self, dt: Any, table: pa.Table) -> SinkResult | None:
        """The result of a batch that commits nothing (append of no rows, update of no rows), else None."""
        mode = self.ctx.output_mode
        if mode == "append" and table.num_rows == 0:
            return SinkResult(0, version=dt.version() if dt is not None else None)
        if mode == "update" and dt is not None:
            if not list(self.ctx.key_columns):
                raise ValueError(f"{self.description}: update mode needs result keys (a group_by); this query "
                                 "has none")
            if table.num_rows == 0:
                return SinkResult(0, version=dt.version())
        return None

    def _result_extra(self, table: pa.Table) -> dict[str, Any]:
        return {}

    def _explain_failed_commit(self, dt: Any, batch_id: int, table: pa.Table, e: Exception) -> None:
        """A commit failed on a fresh snapshot: raise SinkSchemaError naming a schema mismatch, if
        that is why (else return: the caller re-raises the original error)."""
        if dt is None or self.ctx.output_mode == "complete":
            return
        diff = schema_difference(pa.schema(dt.schema().to_arrow()), table.schema)
        if not diff:
            return
        raise self._drift(batch_id, diff, e) from None

    def _retyped(self, dt: Any, table: pa.Table) -> list[str]:
        """The columns of the output whose type in the table differs (another writer changed it,
        e.g. BIGINT -> STRING): the commit would cast this batch's values to it, so it is refused
        like the drift a failing commit reveals. Only where the rows are committed as they are
        (not a subclass that writes other rows, such as AUTO CDC) and not in complete mode (it
        replaces the schema)."""
        if dt is None or self.ctx.output_mode == "complete" or type(self)._commit is not DeltaSink._commit:
            return []
        have = pa.schema(dt.schema().to_arrow())
        return [f"column {f.name!r} is {have.field(f.name).type} in the table but {f.type} in the output"
                for f in table.schema if f.name in have.names and not _same_type(f.type, have.field(f.name).type)]

    def _drift(self, batch_id: int, diff: list[str], cause: BaseException | None = None) -> Exception:
        return SinkSchemaError(
            f"{self.description}, batch {batch_id}: the table's schema does not fit this query's output "
            f"({'; '.join(diff)}); another writer may have changed the table. Nothing of the batch was "
            f"written. Restore the table's schema, change the query to write those columns, or write to a "
            f"new table (with a new checkpoint)." + (f" [{storage.redact(str(cause))}]" if cause is not None else ""))

    def _snapshot(self) -> tuple[Any, int | None, bool]:
        """(the sink's DeltaTable or None when there is no table, this query's last batch id in it,
        whether it was loaded just now). The first call loads the table (a listing plus the log
        since its last checkpoint) and reads the query's transaction (a replay of that log); later
        calls cost no request (add_batch's docstring says why that is safe)."""
        dt = getattr(self, "_dt", None)
        if dt is not None:
            return dt, self._done, False
        self._dt = dt = self._table()
        v = dt.transaction_version(self.ctx.query_id) if dt is not None else None
        self._done = None if v is None else int(v)
        return dt, self._done, True

    def _commit(self, dt: Any, batch_id: int, table: pa.Table) -> None:
        mode = self.ctx.output_mode
        props = commit_properties(self.ctx.query_id, batch_id, self.ctx.query_name)
        hooks = post_commit_hooks(dt)
        if mode == "update" and dt is not None:
            pred = merge_predicate(table, self.ctx.key_columns)
            (dt.merge(table, pred, source_alias="s", target_alias="t", commit_properties=props,
                      post_commithook_properties=hooks)
               .when_matched_update_all().when_not_matched_insert_all().execute())
        else:
            write_deltalake(dt if dt is not None else self.path, table,
                            mode="overwrite" if mode == "complete" else "append",
                            partition_by=self.partition_by if dt is None else None, commit_properties=props,
                            configuration=(self.table_properties or None) if dt is None else None,
                            storage_options=self.storage_options,
                            schema_mode="overwrite" if mode == "complete" else None,
                            post_commithook_properties=hooks)


def merge_predicate(table: pa.Table, keys: Any) -> str:
    """The MERGE condition of an update-mode batch: its keys matched null-safely, as Spark's
    result keys are (a group whose key is NULL is one group, updated in place, never appended
    again). `IS NOT DISTINCT FROM` only for a key column that holds a NULL in the batch: elsewhere
    `=` means the same (the batch's side is never NULL) and lets delta-rs prune files by it."""
    def one(k: str) -> str:
        col = table.column(k) if k in table.column_names else None
        null_safe = col is not None and (col.null_count > 0 or (
            pa.types.is_struct(col.type) and any(c.null_count for c in col.combine_chunks().flatten())))
        op = "IS NOT DISTINCT FROM" if null_safe else "="
        return f"(t.{_quote(k)} {op} s.{_quote(k)})"
    return " AND ".join(one(k) for k in keys)


def post_commit_hooks(dt: Any):
    """delta-rs' post-commit hooks for a commit on `dt`: a checkpoint as the table's
    delta.checkpointInterval says (as always), and the expired-log cleanup (which lists the whole
    _delta_log) only on the commits that write a checkpoint, as Delta Lake itself does, instead of
    after every commit (one listing less per batch on an object store). The table's
    delta.enableExpiredLogCleanup and delta.logRetentionDuration still decide what a cleanup removes."""
    if dt is None:
        return None
    try:
        interval = int(dt.metadata().configuration.get("delta.checkpointInterval") or 100)
    except (TypeError, ValueError):
        interval = 100
    checkpoint_next = (dt.version() + 1) % max(interval, 1) == 0
    return PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=None if checkpoint_next else False)


def schema_difference(table_schema: pa.Schema, output: pa.Schema) -> list[str]:
    """What differs between a Delta table's schema and the query's output, column by column."""
    out = []
    for f in table_schema:
        if f.name not in output.names:
            out.append(f"column {f.name!r} ({f.type}) is in the table but not in the query's output")
        elif not _same_type(output.field(f.name).type, f.type):
            out.append(f"column {f.name!r} is {f.type} in the table but {output.field(f.name).type} in the output")
    out += [f"column {f.name!r} ({f.type}) of the output is not in the table" for f in output
            if f.name not in table_schema.names]
    return out


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    norm = {pa.large_string(): pa.string(), pa.string_view(): pa.string(), pa.large_binary(): pa.binary(),
            pa.binary_view(): pa.binary()}
    return norm.get(a, a) == norm.get(b, b) or (pa.types.is_timestamp(a) and pa.types.is_timestamp(b))

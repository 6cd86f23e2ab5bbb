"""frame.write_stream: DataStreamWriter (format, output_mode, option, checkpoint_location,
query_name, trigger, foreach_batch, start).

Locations: checkpoint_location(...) and start(path) take a local path or a URL (file://, s3://,
gs://, az://, abfss://); an unknown scheme is refused at start() naming it, before anything is
written. Query-level options about where things live:
  storage_options  a dict of object-store options (delta-rs' names); sources and sinks merge their
                   own over it. Secret values never appear in errors, progress or history.
  log_url          the offsets/commits log (SQLAlchemy URL; default INCREMENTS_LOG_URL, else an
                   SQLite file in a local checkpoint). A checkpoint on an object store needs
                   PostgreSQL here: the SQLite log is refused at start() for it.
  local_dir        the root of the local caches (RocksDB working copies); default
                   INCREMENTS_LOCAL_DIR, else <TMPDIR>/increments-<uid>. Caches only: a start on
                   another machine rebuilds them from the checkpoint.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable

from ..errors import AnalysisException
from ..execution.listeners import streams
from ..execution.settings import WriterSettings
from ..identifiers import check_query_name
from ..operators.apply_changes_spec import ApplyChangesSpec
from ..triggers import Trigger

if TYPE_CHECKING:       # the engine (DuckDB, pyarrow) loads when a query is built or started, not with the writer
    import pyarrow as pa


class DataStreamWriter:
    def __init__(self, frame: Any):
        self._frame = frame
        self._s = WriterSettings()
        self._listeners: list[Any] = []

    def _copy(self) -> "DataStreamWriter":
        w = copy.copy(self)
        w._s = copy.deepcopy(self._s) if self._s.foreach_batch is None and self._s.sink is None else copy.copy(self._s)
        w._s.options = dict(self._s.options)
        w._listeners = list(self._listeners)
        return w

    def format(self, fmt: str) -> "DataStreamWriter":
        w = self._copy()
        w._s.format = fmt.lower()
        return w

    def output_mode(self, mode: str) -> "DataStreamWriter":
        w = self._copy()
        w._s.output_mode = mode.lower()
        return w

    outputMode = output_mode

    def option(self, key: str, value: Any) -> "DataStreamWriter":
        w = self._copy()
        w._s.options[key] = value
        return w

    def options(self, **opts: Any) -> "DataStreamWriter":
        w = self._copy()
        w._s.options.update(opts)
        return w

    def checkpoint_location(self, path: str) -> "DataStreamWriter":
        w = self._copy()
        w._s.checkpoint = path
        return w

    def query_name(self, name: str) -> "DataStreamWriter":
        """The query's name: letters, digits, '_' and '-' (increments/identifiers.py), refused here otherwise."""
        w = self._copy()
        w._s.query_name = check_query_name(name)
        return w

    queryName = query_name

    def trigger(self, processing_time: str | None = None, available_now: bool = False, once: bool = False,
                **kw: Any) -> "DataStreamWriter":
        processing_time = processing_time or kw.pop("processingTime", None)
        available_now = available_now or kw.pop("availableNow", False)
        if kw:
            raise TypeError(f"trigger: unknown arguments {sorted(kw)}")
        w = self._copy()
        w._s.trigger = Trigger.make(processing_time=processing_time, available_now=available_now, once=once)
        return w

    def foreach_batch(self, fn: Callable[[pa.Table, int], Any]) -> "DataStreamWriter":
        w = self._copy()
        w._s.foreach_batch = fn
        w._s.format = "foreach_batch"
        return w

    foreachBatch = foreach_batch

    def apply_changes(self, keys: Any, sequence_by: Any, apply_as_deletes: str | None = None,
                      except_columns: Any = None, stored_as_scd_type: int = 1, **options: Any) -> "DataStreamWriter":
        """AUTO CDC (Databricks' APPLY CHANGES): the query's rows are change events applied to the
        format('delta') or format('postgres') table by `keys`, ordered by `sequence_by`, deleting
        where `apply_as_deletes` holds; SCD type 1 keeps the latest row per key, type 2 its history
        with __start_at / __end_at. Also: columns, track_history_columns,
        track_history_except_columns, tombstone_retention ("2 days"); Databricks' *_column_list
        names are accepted. Semantics: operators/apply_changes.py."""
        w = self._copy()
        w._s.apply_changes = ApplyChangesSpec.make(keys, sequence_by, apply_as_deletes, except_columns,
                                                   stored_as_scd_type, **options)
        return w

    applyChanges = apply_changes

    def sink(self, sink: Any) -> "DataStreamWriter":
        """Write to a Sink instance (sinks.base.Sink) instead of a named format."""
        w = self._copy()
        w._s.sink = sink
        return w

    def listener(self, listener: Any) -> "DataStreamWriter":
        """A StreamingQueryListener for this query only."""
        w = self._copy()
        w._listeners.append(listener)
        return w

    @property
    def settings(self) -> WriterSettings:
        return self._s

    @property
    def frame(self) -> Any:
        return self._frame

    def build(self, path: str | None = None, staging: str = "memory"):
        """Compile and open the query without running it (the Dagster definitions use this)."""
        from ..execution.runtime import build_runtime  # noqa: PLC0415 - increments.execution.runtime (deltalake, duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path
        s = copy.copy(self._s)
        if path is not None:
            s.path = path
        rt = build_runtime(self._frame, s, staging=staging)
        rt.listeners.extend(self._listeners)
        return rt

    def start(self, path: str | None = None):
        """Start the query on a background thread; returns a StreamingQuery."""
        name = self._s.query_name
        if name and any(q.name == name and q.is_active for q in streams.active.values()):
            raise AnalysisException(f"a query named {name!r} is already active in this process; stop it first")
        from ..execution.query import StreamingQuery  # noqa: PLC0415 - increments.execution.query (deltalake, duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path
        rt = self.build(path)
        return StreamingQuery(rt, self._s.trigger).start()

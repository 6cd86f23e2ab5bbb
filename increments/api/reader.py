"""inc.read_stream (streaming sources) and inc.read (static tables for stream-static joins).

Every path is a local path or a URL (s3://, gs://, az://, abfss://, file://; increments.storage);
an unknown scheme is refused here, naming it. `storage_options=` (delta-rs' names) add to the
cloud's environment; a streaming source's own options win over the query's
(write_stream .option("storage_options", ...)).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .. import storage
from ..execution.batch_sizing import mark_auto
from ..options import source_options
from ..plan import nodes as n
from ..sources.delta import DeltaSource
from ..sources.delta_changes import DeltaChangeFeedSource
from ..sources.files import FileSource
from ..sources.memory import MemorySource
from .frame import StreamFrame
from .static import StaticTable, as_static_node  # noqa: F401  (as_static_node: re-exported)

if TYPE_CHECKING:               # pyarrow loads when a table is read, not with the API
    import pyarrow as pa


class _MemoryFrame(StreamFrame):
    """A frame over a memory source; `add_data(rows)` feeds it."""

    def add_data(self, rows: Any) -> int:
        return self._source.add_data(rows)

    addData = add_data


def _is_auto(limit: Any) -> bool:
    """max_files_per_trigger="auto" / max_offsets_per_trigger="auto": sized by the planner from the
    log's history toward .option("target_batch_duration", ...) (execution/batch_sizing.py)."""
    return isinstance(limit, str) and limit.strip().lower() == "auto"


def _given(**kw: Any) -> dict[str, Any]:
    """The named parameters of a read_stream method that were given (not None), for source_options."""
    return {k: v for k, v in kw.items() if v is not None}


def _auto(source: Any, unit: str, attribute: str) -> Any:
    return mark_auto(source, unit, attribute)


class DataStreamReader:
    def files(self, path: str, format: str = "json", schema: Any = None, max_files_per_trigger: int | None = None,
              storage_options: dict[str, Any] | None = None, **options: Any) -> StreamFrame:
        options = source_options("files", {**options, **_given(max_files_per_trigger=max_files_per_trigger,
                                                                storage_options=storage_options)},
                                 f"read_stream.files({storage.redact_url(os.fspath(path))!r})")
        max_files_per_trigger = options.pop("max_files_per_trigger", None)
        storage_options = options.pop("storage_options", None)
        auto = _is_auto(max_files_per_trigger)
        src = FileSource(path, format, schema, None if auto else max_files_per_trigger,
                         storage_options=storage_options, **options)
        return StreamFrame(n.SourceNode(_auto(src, "files", "max_files_per_trigger") if auto else src))

    def json(self, path: str, schema: Any, **kw: Any) -> StreamFrame:
        return self.files(path, "json", schema, **kw)

    def csv(self, path: str, schema: Any, **kw: Any) -> StreamFrame:
        return self.files(path, "csv", schema, **kw)

    def parquet(self, path: str, schema: Any = None, **kw: Any) -> StreamFrame:
        return self.files(path, "parquet", schema, **kw)

    def kafka(self, bootstrap_servers: str, topic: str | None = None, topics: Any = None,
              starting_offsets: Any = "earliest", max_offsets_per_trigger: int | None = None,
              fail_on_data_loss: bool = True, **client_config: Any) -> StreamFrame:
        from ..sources.kafka import KafkaSource  # noqa: PLC0415 - increments.sources.kafka (numpy, pyarrow): kept off the code location's import path
        given = source_options("kafka", {**client_config, **_given(
            starting_offsets=starting_offsets, max_offsets_per_trigger=max_offsets_per_trigger,
            fail_on_data_loss=fail_on_data_loss)}, f"read_stream.kafka(topic={topic or topics!r})")
        starting_offsets = given.pop("starting_offsets", "earliest")
        max_offsets_per_trigger = given.pop("max_offsets_per_trigger", None)
        fail_on_data_loss = given.pop("fail_on_data_loss", True)
        client_config = given
        auto = _is_auto(max_offsets_per_trigger)
        src = KafkaSource(bootstrap_servers, topic=topic, topics=topics, starting_offsets=starting_offsets,
                          max_offsets_per_trigger=None if auto else max_offsets_per_trigger,
                          fail_on_data_loss=fail_on_data_loss, **client_config)
        return StreamFrame(n.SourceNode(_auto(src, "offsets", "max_offsets_per_trigger") if auto else src))

    def delta(self, path: str, max_files_per_trigger: int | None = None,
              storage_options: dict[str, Any] | None = None, read_change_feed: bool = False,
              starting_version: int | str | None = None, **options: Any) -> StreamFrame:
        """The rows appended to a Delta table; with read_change_feed=True its change data feed
        (sources/delta_changes.py: _change_type, _commit_version, _commit_timestamp; options
        starting_version, max_bytes_per_trigger, fail_on_data_loss)."""
        kind = "delta_change_feed" if read_change_feed else "delta"
        options = source_options(kind, {**options, **_given(max_files_per_trigger=max_files_per_trigger,
                                                             storage_options=storage_options)},
                                 f"read_stream.delta({storage.redact_url(os.fspath(path))!r})")
        max_files_per_trigger = options.pop("max_files_per_trigger", None)
        storage_options = options.pop("storage_options", None)
        auto = _is_auto(max_files_per_trigger)
        if read_change_feed:
            src = DeltaChangeFeedSource(path, starting_version, None if auto else max_files_per_trigger,
                                        storage_options=storage_options, **options)
        else:
            if starting_version is not None:
                raise ValueError("read_stream.delta: starting_version needs read_change_feed=True (the append "
                                 "stream starts with the table's first version)")
            src = DeltaSource(path, max_files_per_trigger=None if auto else max_files_per_trigger,
                              storage_options=storage_options, **options)
        return StreamFrame(n.SourceNode(_auto(src, "files", "max_files") if auto else src))

    def iceberg(self, table: str, catalog: dict[str, Any] | None = None, max_files_per_trigger: int | None = None,
                **options: Any) -> StreamFrame:
        """The rows appended to an Iceberg table, snapshot by snapshot (sources/iceberg.py)."""
        from ..sources.iceberg import IcebergSource  # noqa: PLC0415 - increments.sources.iceberg (numpy, pandas, pyarrow, pyiceberg): kept off the code location's import path
        options = source_options("iceberg", {**options, **_given(max_files_per_trigger=max_files_per_trigger)},
                                 f"read_stream.iceberg({table!r})")
        max_files_per_trigger = options.pop("max_files_per_trigger", None)
        auto = _is_auto(max_files_per_trigger)
        src = IcebergSource(table, catalog, max_files_per_trigger=None if auto else max_files_per_trigger, **options)
        return StreamFrame(n.SourceNode(_auto(src, "files", "max_files") if auto else src))

    def memory(self, schema: Any, name: str | None = None) -> "_MemoryFrame":
        src = MemorySource(schema, name)
        f = _MemoryFrame(n.SourceNode(src))
        f._source = src
        return f


class DataFrameReader:
    def delta(self, path: str, storage_options: dict[str, Any] | None = None) -> StaticTable:
        """The Delta table at `path`, re-read at its latest version every batch."""
        path = os.fspath(path)
        storage.check_scheme(path, "read.delta: path")
        storage.remember_secrets(storage_options)
        opts = dict(storage_options or {}) or None

        def load():     # not DeltaTable.to_pyarrow_table(): it can abort the process at exit (sinks/delta.py)
            from ..sinks.delta import read_table  # noqa: PLC0415 - increments.sinks.delta (deltalake, numpy, pyarrow): kept off the code location's import path
            return read_table(path, opts)

        def schema():
            import pyarrow as pa  # noqa: PLC0415 - pyarrow: kept off the code location's import path
            from deltalake import DeltaTable  # noqa: PLC0415 - deltalake: kept off the code location's import path
            return pa.schema(DeltaTable(path, storage_options=opts).schema().to_arrow())
        return StaticTable(f"delta[{storage.redact_url(path)}]", load, schema)

    def iceberg(self, table: str, catalog: dict[str, Any] | None = None,
                storage_options: dict[str, Any] | None = None) -> StaticTable:
        """The Iceberg table `table` ("namespace.table") of `catalog`, re-read at its current
        snapshot every batch (the snapshot id is the static side's version)."""
        from ..sources.iceberg import load_table, static_rows  # noqa: PLC0415 - increments.sources.iceberg (numpy, pandas, pyarrow, pyiceberg): kept off the code location's import path

        def load():
            return static_rows(load_table(table, catalog, storage_options, f"read.iceberg({table!r})"))

        def schema():
            from ..sinks.iceberg_table import arrow_schema  # noqa: PLC0415 - increments.sinks.iceberg_table (numpy, pyarrow): kept off the code location's import path
            return arrow_schema(load_table(table, catalog, storage_options, f"read.iceberg({table!r})"))
        return StaticTable(f"iceberg[{table}]", load, schema)

    def files(self, path: str, format: str = "parquet", schema: Any = None,
              storage_options: dict[str, Any] | None = None, **options: Any) -> StaticTable:
        """The files at `path`, re-read every batch: a single file, a directory's files (no
        recursion) or a glob's matching files, in name order (names with a segment starting with
        '.' or '_' are ignored). A path that does not exist fails the load, naming it."""
        src = FileSource(path, format, schema, storage_options=storage_options, **options)

        def load():
            import pyarrow as pa  # noqa: PLC0415 - pyarrow: kept off the code location's import path
            tables = [src.decode_at(loc, name) for loc, name in src.static_files()]
            return pa.concat_tables(tables) if tables else src.schema().empty_table()
        return StaticTable(f"files[{storage.redact_url(src.path)}]", load, src.schema)

    def parquet_sink(self, path: str, storage_options: dict[str, Any] | None = None) -> pa.Table:
        """Every published batch of a format('parquet') sink at `path` (local or URL)."""
        from ..sinks.parquet import read_parquet_sink  # noqa: PLC0415 - increments.sinks.parquet (numpy, pyarrow): kept off the code location's import path
        return read_parquet_sink(path, storage_options)

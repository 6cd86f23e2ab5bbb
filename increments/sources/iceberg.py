"""read_stream.iceberg(table, catalog={...}): the rows appended to an Apache Iceberg table,
snapshot by snapshot (pyiceberg; the catalog dict as for the sink: sinks/iceberg_table.py).

Offsets are {"snapshot_id": S, "index": I}: every data file added by the snapshots before S in the
main branch's history has been read, and the first I files S added (in its manifests' order).
{"snapshot_id": null, "index": 0} is the start of the history: the first batches hold the rows of
the table's first snapshots (as Spark's Iceberg stream reads the table from its oldest snapshot),
later ones each new snapshot's files. `starting_snapshot_id` starts at that snapshot instead (its
files included).

Snapshot kinds (the `operation` of its summary): append -> its added data files; replace
(compaction: same rows in new files) -> skipped; overwrite and delete -> the batch fails naming the
snapshot, unless skip_overwrite_snapshots=True / skip_delete_snapshots=True (then skipped), as
Iceberg's Spark source (streaming-skip-overwrite-snapshots, streaming-skip-delete-snapshots).
Rate limits: max_files_per_trigger and max_rows_per_trigger (from the files' record counts; a
batch takes at least one file), a snapshot may be split over batches.

Replay: read(start, end) re-reads exactly the files between the two positions (a snapshot's added
files never change). Failures, named: the offset's snapshot is gone from the table's metadata
(expire_snapshots) -> DataLossError; it is no longer an ancestor of the current snapshot (a
rollback) -> MalformedInputError; a data file is gone (orphan-file removal) -> DataLossError.
"""
from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFileContent, ManifestEntryStatus
from pyiceberg.table import FileScanTask

from .. import storage
from ..errors import DataLossError, MalformedInputError
from ..sinks import iceberg_table as I
from .base import Source


def _catalog_dict(catalog: Any) -> dict[str, Any]:
    return json.loads(catalog) if isinstance(catalog, str) else dict(catalog or {})


def load_table(name: str, catalog: Any, storage_options: dict[str, Any] | None, where: str):
    """(pyiceberg Table, namespace, table) of "namespace.table" in `catalog` (a fresh load)."""
    ns, tbl = I.identifier(name, where)
    props = I.catalog_properties(_catalog_dict(catalog), None, storage_options)
    return I.load_catalog(props, where).load_table((*ns, tbl))


def static_rows(t: Any) -> tuple[pa.Table, int | None]:
    """(every row of the table at its current snapshot, that snapshot's id): a static side."""
    schema = I.arrow_schema(t)
    snap = t.current_snapshot()
    if snap is None:
        return schema.empty_table(), None
    return t.scan().to_arrow().select(schema.names).cast(schema), int(snap.snapshot_id)


class IcebergSource(Source):
    _per_query = {"_target": None}

    def __init__(self, table: str, catalog: Any = None, max_files_per_trigger: int | None = None,
                 max_rows_per_trigger: int | None = None, skip_overwrite_snapshots: bool = False,
                 skip_delete_snapshots: bool = False, starting_snapshot_id: int | None = None,
                 storage_options: dict[str, Any] | None = None):
        self.table_name = str(table)
        I.identifier(self.table_name, "read_stream.iceberg")
        self.catalog = _catalog_dict(catalog)
        storage.remember_secrets(self.catalog)
        self.storage_options = dict(storage_options or {})
        for name, v in (("max_files_per_trigger", max_files_per_trigger), ("max_rows_per_trigger", max_rows_per_trigger)):
            if v is not None and int(v) < 1:
                raise ValueError(f"read_stream.iceberg: {name} must be >= 1")
        self.max_files = int(max_files_per_trigger) if max_files_per_trigger else None
        self.max_rows = int(max_rows_per_trigger) if max_rows_per_trigger else None
        self.skip_overwrite = str(skip_overwrite_snapshots).lower() in ("true", "1", "yes")
        self.skip_delete = str(skip_delete_snapshots).lower() in ("true", "1", "yes")
        self.starting_snapshot_id = int(starting_snapshot_id) if starting_snapshot_id is not None else None
        self._files: dict[int, list[Any]] = {}     # snapshot id -> its added data files (immutable)
        self._schema: pa.Schema | None = None
        self._target: int | None = None

    @property
    def description(self) -> str:
        return f"IcebergSource[{self.table_name}]"

    def table(self):
        return load_table(self.table_name, self.catalog, {**self.query_storage_options, **self.storage_options},
                          f"read_stream.iceberg({self.table_name!r})")

    def schema(self) -> pa.Schema:
        if self._schema is None:
            try:
                self._schema = I.arrow_schema(self.table())
            except NoSuchTableError as e:
                raise MalformedInputError(f"read_stream.iceberg({self.table_name!r}): no such table ({e}); create the "
                                          "table first (a stream needs its schema)") from None
        return self._schema

    def initial_offset(self) -> dict:
        return {"snapshot_id": self.starting_snapshot_id, "index": 0}

    # -- the table's history -------------------------------------------------------------------
    def _history(self, t: Any, upto: int | None = None) -> list[int]:
        """Snapshot ids of the main branch, oldest first, up to `upto` (default: the current one)."""
        cur = t.metadata.snapshot_by_id(upto) if upto is not None else t.current_snapshot()
        chain = []
        while cur is not None:
            chain.append(cur.snapshot_id)
            cur = t.metadata.snapshot_by_id(cur.parent_snapshot_id) if cur.parent_snapshot_id is not None else None
        return chain[::-1]

    def _position(self, t: Any, chain: list[int], offset: dict) -> int:
        """Where `offset`'s snapshot is in `chain` (0 for the start of the history)."""
        sid = offset.get("snapshot_id")
        if sid is None:
            return 0
        if t.metadata.snapshot_by_id(int(sid)) is None:
            raise DataLossError(self.fail(f"snapshot {sid}, where the stream stands, is no longer in the table's "
                                          "metadata (expired by expire_snapshots): the rows after it cannot be "
                                          "read exactly. Start a new query with a new checkpoint (starting_snapshot_id "
                                          "= a snapshot the table still has), and expire snapshots only once every "
                                          "stream has read them"))
        if int(sid) not in chain:
            raise MalformedInputError(self.fail(f"snapshot {sid}, where the stream stands, is not an ancestor of the "
                                                "table's current snapshot (a rollback or a replaced history); start a "
                                                "new query with a new checkpoint"))
        return chain.index(int(sid))

    def _added(self, t: Any, sid: int) -> list[Any]:
        if sid in self._files:
            return self._files[sid]
        snap = t.metadata.snapshot_by_id(sid)
        op = I.snapshot_summary(snap).get("operation", "append")
        if op == "replace" or (op == "overwrite" and self.skip_overwrite) or (op == "delete" and self.skip_delete):
            files: list[Any] = []
        elif op != "append":
            option = "skip_overwrite_snapshots" if op == "overwrite" else "skip_delete_snapshots"
            raise MalformedInputError(self.fail(
                f"snapshot {sid} is {'an' if op == 'overwrite' else 'a'} {op} (it removed or rewrote rows); an Iceberg stream reads appends only. Set "
                f"read_stream.iceberg(..., {option}=True) to skip such snapshots, or start a new query"))
        else:
            files = [e.data_file for m in snap.manifests(t.io) if m.added_snapshot_id == sid
                     for e in m.fetch_manifest_entry(t.io, discard_deleted=True)
                     if e.status == ManifestEntryStatus.ADDED and e.snapshot_id == sid
                     and e.data_file.content == DataFileContent.DATA]
        self._files[sid] = files
        return files

    # -- offsets ---------------------------------------------------------------------------------
    def latest_offset(self, start: Any, limited: bool = True) -> dict:
        t = self.table()
        chain = self._history(t, self._target) if self._target is not None else self._history(t)
        pos = self._position(t, chain, start)
        files_left = self.max_files if limited else None
        rows_left = self.max_rows if limited else None
        i = int(start.get("index", 0)) if start.get("snapshot_id") is not None else 0
        end = {"snapshot_id": start.get("snapshot_id"), "index": int(start.get("index", 0))}
        taken = 0
        for sid in chain[pos:]:
            added = self._added(t, sid)
            while i < len(added):
                n = int(added[i].record_count)
                if (files_left is not None and files_left <= 0) or (rows_left is not None and taken and n > rows_left):
                    return end              # the budget ends inside this snapshot
                i, taken = i + 1, taken + 1
                files_left = None if files_left is None else files_left - 1
                rows_left = None if rows_left is None else rows_left - n
                end = {"snapshot_id": sid, "index": i}
            i = 0
        return end

    def has_new_data(self, start: Any, end: Any) -> bool:
        return (start.get("snapshot_id"), int(start.get("index", 0))) != (end.get("snapshot_id"), int(end.get("index", 0)))

    def read(self, start: Any, end: Any) -> pa.Table:
        """The rows of the data files between the two positions (module doc), in history order."""
        schema = self.schema()
        if not self.has_new_data(start, end):
            return schema.empty_table()
        t = self.table()
        chain = self._history(t, int(end["snapshot_id"]))
        lo = self._position(t, chain, start)
        first = int(start.get("index", 0)) if start.get("snapshot_id") is not None else 0
        tables = []
        for k in range(lo, len(chain)):
            added = self._added(t, chain[k])
            a = first if k == lo else 0
            b = int(end["index"]) if k == len(chain) - 1 else len(added)
            tables += [self._read_file(t, f, schema) for f in added[a:b]]
        tables = [x for x in tables if x.num_rows]
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def _read_file(self, t: Any, data_file: Any, schema: pa.Schema) -> pa.Table:
        try:
            out = ArrowScan(table_metadata=t.metadata, io=t.io, projected_schema=t.schema(),
                            row_filter=AlwaysTrue()).to_table(tasks=[FileScanTask(data_file)])
        except FileNotFoundError:
            raise DataLossError(self.fail(f"data file {data_file.file_path} is gone (orphan files removed?); start a "
                                          "new query with a new checkpoint")) from None
        return out.select(schema.names).cast(schema)

    def prepare_available_now(self) -> None:
        s = self.table().current_snapshot()
        self._target = None if s is None else int(s.snapshot_id)

    def available_now_target(self) -> Any:
        return self._target

    def set_available_now_target(self, target: Any) -> None:
        self._target = target

"""read_stream.delta(path): the rows appended to a Delta table, commit by commit.

Offsets are {"version": V, "index": I}: every data file added before file I of commit V has been
read (files of a commit in the order of its add actions). The initial offset is (0, 0): the stream
starts with the table's first commit, so the first batches hold the table's existing rows (as
Spark's initial snapshot) and later ones each new commit's files. `max_files_per_trigger` caps the
files per batch (a commit may be split over batches); without it a batch takes everything new.

Replay: read(start, end) lists the add actions of commits start.version..end.version from the
table's log and reads exactly the files between the two positions, so a redo reads the same rows.
Contract: the table is append-only for this stream. A commit that removes data files with
dataChange=true (delete, update, overwrite) fails the batch naming the version, unless
`ignore_changes=True` (then its added files are read and the removals ignored, as Spark's
ignoreChanges). Commits that only compact files (dataChange=false) are skipped.
If the log's JSON for a needed version is gone (log cleanup), the batch fails naming the version.

Where: `path` is a local path or a URL (s3://, gs://, az://, abfss://, file://; unknown schemes are
refused when the source is made). The log's JSON and the data files are read through
increments.storage; DeltaTable (schema, latest version) gets the same storage_options: this
source's own `storage_options=` over the query's (Source.open).
"""
from __future__ import annotations

import json
import os
from typing import Any

from ..lazy import lazy_module

from .. import storage
from ..errors import DataLossError, MalformedInputError
from ..storage import Location
from .base import Source
from .delta_files import conform, file_location, read_parquet

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py


class DeltaSource(Source):
    _per_query = {"_target": None, "_loc": None, "_dt": None}

    def __init__(self, path: str, max_files_per_trigger: int | None = None, ignore_changes: bool = False,
                 storage_options: dict[str, Any] | None = None, **options: Any):
        path = os.fspath(path)
        storage.check_scheme(path, "read_stream.delta: path")
        self.path = path.rstrip("/") if storage.scheme_of(path) else os.path.abspath(path)
        self.storage_options = dict(storage_options or {})
        storage.remember_secrets(self.storage_options)
        self._loc: Location | None = None
        self._dt: Any = None          # the DeltaTable the plans follow (brought up to date incrementally)
        if max_files_per_trigger is not None and int(max_files_per_trigger) < 1:
            raise ValueError("max_files_per_trigger must be >= 1")
        self.max_files = int(max_files_per_trigger) if max_files_per_trigger else None
        self.ignore_changes = str(ignore_changes).lower() in ("true", "1", "yes")
        self._adds: dict[int, list[dict]] = {}   # version -> data-changing add actions (immutable once read)
        self._schema: pa.Schema | None = None
        self._target: int | None = None

    @property
    def description(self) -> str:
        return f"DeltaSource[{storage.redact_url(self.path)}]"

    def options(self) -> dict[str, Any]:
        """The storage options: this source's own over the query's."""
        return {**self.query_storage_options, **self.storage_options}

    def open(self, checkpoint: Any, index: int, query_name: str, storage_options: dict | None = None) -> None:
        super().open(checkpoint, index, query_name, storage_options)
        self._loc = self._dt = None

    def table(self):
        from deltalake import DeltaTable  # noqa: PLC0415 - deltalake: kept off the code location's import path
        return DeltaTable(self.path, storage_options=self.options() or None)

    def location(self) -> Location:
        if self._loc is None:
            self._loc = storage.location(self.path, self.options())
        return self._loc

    def schema(self) -> pa.Schema:
        if self._schema is None:
            from deltalake.exceptions import TableNotFoundError  # noqa: PLC0415 - deltalake: kept off the code location's import path
            where = f"read_stream.delta({storage.redact_url(self.path)!r})"
            try:
                self._schema = pa.schema(self.table().schema().to_arrow())
            except TableNotFoundError as e:
                raise MalformedInputError(f"{where}: not a Delta table ({storage.redact(e)}); create the table first "
                                          "(a stream needs its schema)") from None
            except Exception as e:  # noqa: BLE001
                raise MalformedInputError(f"{where}: cannot read the table's schema: {storage.redact(e)}. Check the "
                                          "source's storage_options and the cloud's environment variables") from None
        return self._schema

    def initial_offset(self) -> dict:
        return {"version": 0, "index": 0}

    def _latest_version(self) -> int:
        """The table's latest version: loaded once, then updated with the log entries after it."""
        if self._dt is not None:
            try:
                self._dt.update_incremental()
                return self._dt.version()
            except Exception:  # noqa: BLE001 - e.g. the table was replaced: load it afresh
                self._dt = None
        self._dt = self.table()
        return self._dt.version()

    def _commit_adds(self, version: int) -> list[dict]:
        if version in self._adds:
            return self._adds[version]
        name = f"_delta_log/{version:020d}.json"
        try:
            text = self.location().read_bytes(name).decode()
        except FileNotFoundError:
            raise DataLossError(self.fail(f"the log entry of version {version} ({self.location().join(name)}) is gone "
                                          "(log cleanup?); start a new query with a new checkpoint")) from None
        adds, removes = [], 0
        for line in text.splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action and action["add"].get("dataChange", True):
                adds.append(action["add"])
            elif "remove" in action and action["remove"].get("dataChange", True):
                removes += 1
        if removes and not self.ignore_changes:
            raise MalformedInputError(self.fail(
                f"version {version} of the table removed or rewrote {removes} data files (delete, update, merge or "
                "overwrite); a Delta stream source reads appends only. Use read_stream.delta(path, "
                "ignore_changes=True) to read the rewritten files again, or start a new query."))
        self._adds[version] = adds
        return adds

    def latest_offset(self, start: Any, limited: bool = True) -> dict:
        latest = self._latest_version()
        if self._target is not None:
            latest = min(latest, self._target)
        budget = self.max_files if (limited and self.max_files) else None
        v, i = int(start["version"]), int(start["index"])
        end = {"version": v, "index": i}
        while v <= latest:
            n = len(self._commit_adds(v))
            take = n - i if budget is None else min(n - i, budget)
            if take > 0:
                end = {"version": v, "index": i + take}
                if budget is not None:
                    budget -= take
                    if budget == 0:
                        break
            v, i = v + 1, 0
        return end

    def has_new_data(self, start: Any, end: Any) -> bool:
        return (int(start["version"]), int(start["index"])) != (int(end["version"]), int(end["index"]))

    def _files(self, start: dict, end: dict) -> list[dict]:
        out = []
        for v in range(int(start["version"]), int(end["version"]) + 1):
            adds = self._commit_adds(v)
            lo = int(start["index"]) if v == int(start["version"]) else 0
            hi = int(end["index"]) if v == int(end["version"]) else len(adds)
            out += adds[lo:hi]
        return out

    def read(self, start: Any, end: Any) -> pa.Table:
        """The rows of the data files between the two positions (module doc), in log order."""
        schema = self.schema()
        tables = [self._read_file(a, schema) for a in self._files(start, end)]
        tables = [t for t in tables if t.num_rows]
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def _read_file(self, add: dict, schema: pa.Schema) -> pa.Table:
        if add.get("deletionVector"):
            raise MalformedInputError(self.fail(f"file {add['path']} has a deletion vector; a Delta stream source "
                                                "reads appends only"))
        loc, name = file_location(self.location(), add["path"], self.options())
        try:
            t = read_parquet(loc, name)
        except FileNotFoundError as e:
            raise DataLossError(self.fail(f"data file {e} is gone (vacuumed?); start a new query")) from None
        return pa.Table.from_arrays(conform(t, schema, add.get("partitionValues")), schema=schema)

    def prepare_available_now(self) -> None:
        self._target = self._latest_version()

    def available_now_target(self) -> Any:
        return self._target

    def set_available_now_target(self, target: Any) -> None:
        self._target = target

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
"""
from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DataLossError, MalformedInputError
from .base import Source


class DeltaSource(Source):
    _per_query = {"_target": None}

    def __init__(self, path: str, max_files_per_trigger: int | None = None, ignore_changes: bool = False,
                 **options: Any):
        self.path = os.path.abspath(path)
        if max_files_per_trigger is not None and int(max_files_per_trigger) < 1:
            raise ValueError("max_files_per_trigger must be >= 1")
        self.max_files = int(max_files_per_trigger) if max_files_per_trigger else None
        self.ignore_changes = str(ignore_changes).lower() in ("true", "1", "yes")
        self._adds: dict[int, list[dict]] = {}   # version -> data-changing add actions (immutable once read)
        self._schema: pa.Schema | None = None
        self._target: int | None = None

    @property
    def description(self) -> str:
        return f"DeltaSource[{self.path}]"

    def schema(self) -> pa.Schema:
        if self._schema is None:
            from deltalake import DeltaTable
            try:
                self._schema = pa.schema(DeltaTable(self.path).schema().to_arrow())
            except Exception as e:  # noqa: BLE001
                raise MalformedInputError(f"read_stream.delta({self.path!r}): not a Delta table ({e}); create the "
                                          "table first (a stream needs its schema)") from e
        return self._schema

    def initial_offset(self) -> dict:
        return {"version": 0, "index": 0}

    def _latest_version(self) -> int:
        from deltalake import DeltaTable
        return DeltaTable(self.path).version()

    def _commit_adds(self, version: int) -> list[dict]:
        if version in self._adds:
            return self._adds[version]
        f = os.path.join(self.path, "_delta_log", f"{version:020d}.json")
        if not os.path.exists(f):
            raise DataLossError(self.fail(f"the log entry of version {version} ({f}) is gone (log cleanup?); "
                                          "start a new query with a new checkpoint"))
        adds, removes = [], 0
        with open(f) as fh:
            for line in fh:
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
        rel = unquote(add["path"])
        path = rel if "://" in rel or os.path.isabs(rel) else os.path.join(self.path, rel)
        try:
            t = pq.read_table(path)
        except FileNotFoundError as e:
            raise DataLossError(self.fail(f"data file {path} is gone (vacuumed?); start a new query")) from e
        parts = add.get("partitionValues") or {}
        cols = []
        for f in schema:
            if f.name in t.column_names:
                cols.append(t.column(f.name).cast(f.type))
            elif f.name in parts:
                v = parts[f.name]
                cols.append(pa.array([v] * t.num_rows, pa.string()).cast(f.type))
            else:
                cols.append(pa.nulls(t.num_rows, f.type))
        return pa.Table.from_arrays(cols, schema=schema)

    def prepare_available_now(self) -> None:
        self._target = self._latest_version()

    def available_now_target(self) -> Any:
        return self._target

    def set_available_now_target(self, target: Any) -> None:
        self._target = target

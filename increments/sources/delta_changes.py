"""read_stream.delta(path, read_change_feed=True): a Delta table's change data feed, version by version.

Rows: the table's columns, then `_change_type` ("insert", "update_preimage", "update_postimage",
"delete"), `_commit_version` (BIGINT) and `_commit_timestamp` (TIMESTAMP: the commit's
commitInfo.timestamp, as deltalake's load_cdf gives it; the log file's modification time when a
commit has none).

Offsets (JSON): {"version": V} = every change of versions <= V has been read; during the initial
snapshot {"version": S, "index": I, "snapshot": true} = the first I data files (by path) of the
table as of version S have been read.
- starting_version=None (as Spark without startingVersion): the table's rows at its latest version
  S come first, as inserts with _commit_version S, then the changes of S+1, S+2, ...;
  starting_version=N: the changes of versions N, N+1, ...; "latest": changes after the latest version.
- Rate limit as Spark's Delta source: max_files_per_trigger (default 1000 when neither limit is
  set) and max_bytes_per_trigger (a soft limit: "10g", "512m", or bytes). A change version is never
  split over batches: versions are admitted whole while the batch still has capacity, at least one
  per batch. Snapshot files are admitted one by one. Versions without data changes (OPTIMIZE,
  property changes) hold no rows and start no batch of their own.

What a version holds, as delta-rs' load_cdf and Spark's CDCReader read it: its cdc files under
_change_data/ when the commit wrote any (they carry _change_type); otherwise its added data files
are inserts and its removed data files deletes (dataChange=false actions are skipped).

Refusals and data loss: a version read while the table's delta.enableChangeDataFeed is not true
(as of that version) fails the batch naming the table and the version. A version whose log entry
or files are gone (log cleanup, VACUUM) fails the batch naming the version and file
(DataLossError); with fail_on_data_loss=False it is skipped whole (a snapshot file: that file) and
named in the batch's progress (sources[i].data_loss) and the log. Deletion vectors are refused.

Replay: read(start, end) lists the same versions' actions from the log (immutable once written),
so a redo reads the same rows, unless files vanished in between (then the rule above).

Files are read through increments.storage (as the append source and read.delta do: the README
says why not DeltaTable.to_pyarrow_table), decoded by pyarrow from Arrow memory.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .. import storage
from ..errors import DataLossError, MalformedInputError
from ..lazy import lazy_module
from ..redaction import logger as redacting_logger
from .delta import DeltaSource
from .delta_files import conform, file_location, read_parquet

log = redacting_logger("increments.sources.delta_changes")

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py


def _ts() -> "pa.DataType":
    return pa.timestamp("us", tz="UTC")


def change_fields() -> list:
    """The change feed's metadata columns, after the table's own."""
    return [pa.field("_change_type", pa.string()), pa.field("_commit_version", pa.int64()),
            pa.field("_commit_timestamp", _ts())]


DEFAULT_MAX_FILES = 1000
CHANGE_TYPES = ("insert", "update_preimage", "update_postimage", "delete")


def parse_bytes(value: Any) -> int | None:
    """maxBytesPerTrigger: an int, or "512k" / "64m" / "10g" / "1t" (optionally with "b", "ib")."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        n = int(value)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(value).lower())
        if not m:
            raise ValueError(f"max_bytes_per_trigger={value!r}: use bytes or a size such as '512m' or '10g'")
        n = int(float(m.group(1)) * 1024 ** "_kmgt".index(m.group(2) or "_"))
    if n < 1:
        raise ValueError("max_bytes_per_trigger must be >= 1 byte")
    return n


@dataclass
class _Version:
    """What one commit holds for the change feed (immutable once the commit exists)."""
    timestamp_ms: int
    files: list[tuple[str, dict]] = field(default_factory=list)   # (kind: cdc/insert/delete, action)
    configuration: dict | None = None     # the metaData action's configuration, when the commit has one
    missing: str | None = None            # the log entry is gone (fail_on_data_loss=False)

    @property
    def size(self) -> int:
        return sum(int(a.get("size") or 0) for _, a in self.files)


class _Budget:
    """Spark's admission limits: a unit is admitted while files and bytes remain (> 0)."""

    def __init__(self, files: int | None, size: int | None):
        self.files, self.size = files, size

    def open(self) -> bool:
        return (self.files is None or self.files > 0) and (self.size is None or self.size > 0)

    def take(self, files: int, size: int) -> None:
        if self.files is not None:
            self.files -= files
        if self.size is not None:
            self.size -= size


class DeltaChangeFeedSource(DeltaSource):
    _per_query = {"_target": None, "_loc": None, "_dt": None, "read_metrics": {}}

    def __init__(self, path: str, starting_version: int | str | None = None,
                 max_files_per_trigger: int | None = None, max_bytes_per_trigger: Any = None,
                 fail_on_data_loss: bool = True, storage_options: dict[str, Any] | None = None):
        super().__init__(path, max_files_per_trigger=max_files_per_trigger, storage_options=storage_options)
        if starting_version is not None and str(starting_version).lower() != "latest":
            if int(starting_version) < 0:
                raise ValueError("read_stream.delta: starting_version must be >= 0 or 'latest'")
            starting_version = int(starting_version)
        self.starting_version = starting_version
        self.max_bytes = parse_bytes(max_bytes_per_trigger)
        self.fail_on_data_loss = str(fail_on_data_loss).lower() in ("true", "1", "yes")
        self._versions: dict[int, _Version] = {}
        self._snapshots: dict[int, list[dict]] = {}
        self._cdf_at: tuple[int, bool] | None = None       # (version, change data feed enabled then)
        self.read_metrics: dict[str, Any] = {}

    @property
    def description(self) -> str:
        return f"DeltaChangeFeed[{storage.redact_url(self.path)}]"

    def schema(self) -> pa.Schema:
        return pa.schema(list(self.table_schema()) + change_fields())

    def table_schema(self) -> pa.Schema:
        base = super().schema()
        clash = [f.name for f in change_fields() if f.name in base.names]
        if clash:
            raise MalformedInputError(f"read_stream.delta({storage.redact_url(self.path)!r}, read_change_feed=True): "
                                      f"the table has columns {clash}, which the change feed adds; rename them")
        return base

    # -- offsets --------------------------------------------------------------------------------
    def initial_offset(self) -> dict:
        """The start of batch 0. The latest version ("latest", or the snapshot's) is resolved once per
        checkpoint (Source.pinned_initial_offset, as the Kafka source pins "latest"), so changes made
        before batch 0 runs are neither lost nor read twice."""
        if isinstance(self.starting_version, int):
            return {"version": self.starting_version - 1}
        if self.starting_version == "latest":
            return self.pinned_initial_offset(lambda: {"version": self._latest_version()})
        return self.pinned_initial_offset(lambda: {"version": self._latest_version(), "index": 0, "snapshot": True})

    def latest_offset(self, start: Any, limited: bool = True) -> dict:
        latest = self._latest_version()
        if self._target is not None:
            latest = min(latest, self._target)
        files = self.max_files if self.max_files else (None if self.max_bytes else DEFAULT_MAX_FILES)
        budget = _Budget(files, self.max_bytes) if limited else _Budget(None, None)
        end = dict(start)
        if start.get("snapshot"):
            snap, i = self._snapshot(int(start["version"])), int(start["index"])
            while i < len(snap) and budget.open():
                budget.take(1, int(snap[i].get("size") or 0))
                i += 1
            if i < len(snap):
                return {"version": int(start["version"]), "index": i, "snapshot": True}
            end = {"version": int(start["version"])}
        v = int(end["version"]) + 1
        while v <= latest and budget.open():
            ver = self._version(v)
            if ver.files:
                budget.take(len(ver.files), ver.size)
                end = {"version": v}
            v += 1
        return end

    def has_new_data(self, start: Any, end: Any) -> bool:
        return start != end and any(True for _ in self._units(start, end))

    def _units(self, start: dict, end: dict):
        """(version, kind, action) of every file between the two positions, in feed order."""
        v0 = int(start["version"])
        if start.get("snapshot"):
            snap = self._snapshot(v0)
            stop = int(end["index"]) if end.get("snapshot") else len(snap)
            for a in snap[int(start["index"]):stop]:
                yield v0, "insert", a
            if end.get("snapshot"):
                return
        for v in range(v0 + 1, int(end["version"]) + 1):
            for kind, a in self._version(v).files:
                yield v, kind, a

    # -- the log --------------------------------------------------------------------------------
    def _version(self, v: int) -> _Version:
        if v in self._versions:
            return self._versions[v]
        name = f"_delta_log/{v:020d}.json"
        try:
            text = self.location().read_bytes(name).decode()
        except FileNotFoundError:
            msg = (f"the log entry of version {v} ({self.location().join(name)}) is gone (log cleanup: "
                   "delta.logRetentionDuration)")
            if self.fail_on_data_loss:
                raise DataLossError(self.fail(msg + "; its changes cannot be read. Start a new query (new checkpoint) "
                                              "with starting_version after it, or read_stream.delta(..., "
                                              "fail_on_data_loss=False) to skip lost versions")) from None
            return _Version(0, missing=msg)      # not cached: it may be a version not yet written
        ver = _Version(0)
        cdc, adds, removes = [], [], []
        for line in text.splitlines():
            action = json.loads(line) if line.strip() else {}
            if "commitInfo" in action and action["commitInfo"].get("timestamp") is not None:
                ver.timestamp_ms = int(action["commitInfo"]["timestamp"])
            elif "metaData" in action:
                ver.configuration = dict(action["metaData"].get("configuration") or {})
            elif "cdc" in action:
                cdc.append(("cdc", action["cdc"]))
            elif "add" in action and action["add"].get("dataChange", True):
                adds.append(("insert", action["add"]))
            elif "remove" in action and action["remove"].get("dataChange", True):
                removes.append(("delete", action["remove"]))
        ver.files = cdc if cdc else adds + removes
        if not ver.timestamp_ms:
            info = self.location().head(name)
            ver.timestamp_ms = info.mtime_ms if info is not None else 0
        self._versions[v] = ver
        return ver

    def _snapshot(self, v: int) -> list[dict]:
        """The data files of the table as of version v (add actions), in path order."""
        if v not in self._snapshots:
            from deltalake import DeltaTable  # noqa: PLC0415 - deltalake: kept off the code location's import path
            dt = DeltaTable(self.path, version=v, storage_options=self.options() or None)
            if "deletionVectors" in set(dt.protocol().reader_features or []):
                raise MalformedInputError(self.fail("the table uses deletion vectors, which this change feed "
                                                    "reader does not support"))
            actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
            files = []
            for a in actions:
                parts = {k[len("partition."):]: (None if val is None else str(val)) for k, val in a.items()
                         if k.startswith("partition.")}
                files.append({"path": a["path"], "size": a.get("size_bytes"), "partitionValues": parts})
            self._snapshots[v] = sorted(files, key=lambda f: f["path"])
            self._snapshot_timestamp(v, dt)
        return self._snapshots[v]

    def _snapshot_timestamp(self, v: int, dt: Any) -> None:
        """The snapshot's rows carry version v's commit timestamp, also when its log entry is gone
        (a table read from a checkpoint): then from the table's history."""
        try:
            if not self._version(v).missing:
                return
        except DataLossError:
            pass
        ts = next((h.get("timestamp") for h in dt.history() if h.get("version") == v), None)
        self._versions[v] = _Version(int(ts or 0))

    def _cdf_enabled(self, v: int) -> bool:
        """delta.enableChangeDataFeed as of version v (metaData actions replayed forward)."""
        if self._cdf_at is None or self._cdf_at[0] > v:
            from deltalake import DeltaTable  # noqa: PLC0415 - deltalake: kept off the code location's import path
            conf = DeltaTable(self.path, version=v, storage_options=self.options() or None).metadata().configuration
            self._cdf_at = (v, _cdf_on(conf))
            return self._cdf_at[1]
        at, on = self._cdf_at
        for u in range(at + 1, v + 1):
            conf = self._version(u).configuration
            if conf is not None:
                on = _cdf_on(conf)
        self._cdf_at = (v, on)
        return on

    # -- reading --------------------------------------------------------------------------------
    def read(self, start: Any, end: Any) -> pa.Table:
        """The changes between the two positions (module doc), in version and file order."""
        base = self.table_schema()
        out: list[pa.Table] = []
        lost: list[str] = []
        files = 0
        by_version: dict[int, list[tuple[str, dict]]] = {}
        for v, kind, a in self._units(start, end):
            by_version.setdefault(v, []).append((kind, a))
        snapshot_v = int(start["version"]) if start.get("snapshot") else None
        first = int(start["version"]) + (0 if snapshot_v is not None else 1)
        for v in range(first, int(end["version"]) + 1):      # lost log entries (fail_on_data_loss=False)
            if self._version(v).missing:
                lost.append(str(self._version(v).missing))
        for v, items in by_version.items():
            ver = self._version(v)
            if v != snapshot_v and not self._cdf_enabled(v):
                raise MalformedInputError(self.fail(
                    f"version {v} of the table {storage.redact_url(self.path)} has no change data (the table's "
                    "delta.enableChangeDataFeed was not true at that version). Enable it (deltalake: "
                    "DeltaTable(path).alter.set_table_properties({'delta.enableChangeDataFeed': 'true'})) and start a "
                    f"new query (new checkpoint) with starting_version set after version {v}"))
            tables, gone = [], None
            for kind, a in items:
                try:
                    tables.append(self._read_change_file(a, kind, v, ver.timestamp_ms, base))
                except FileNotFoundError as e:
                    gone = str(e)
                    if v == snapshot_v and not self.fail_on_data_loss:
                        lost.append(f"snapshot file {gone} of version {v}")
                        gone = None
                        continue
                    break
            if gone is not None:
                what = f"version {v}: file {gone} is gone (VACUUM?)"
                if self.fail_on_data_loss:
                    raise DataLossError(self.fail(f"{what}; the version's changes cannot be read. Start a new query "
                                                  "(new checkpoint) with starting_version after it, or read_stream."
                                                  "delta(..., fail_on_data_loss=False) to skip lost versions"))
                lost.append(what)
                continue
            files += len(tables)
            out += [t for t in tables if t.num_rows]
        for msg in lost:
            log.warning("%s", self.fail(f"skipped (fail_on_data_loss=False): {msg}"))
        self.read_metrics = {"files": files, "versions": _version_range(by_version),
                             **({"data_loss": lost} if lost else {})}
        schema = self.schema()
        return pa.concat_tables(out) if out else schema.empty_table()

    def _read_change_file(self, action: dict, kind: str, version: int, ts_ms: int, base: pa.Schema) -> pa.Table:
        if action.get("deletionVector"):
            raise MalformedInputError(self.fail(f"file {action['path']} of version {version} has a deletion vector, "
                                                "which this change feed reader does not support"))
        loc, name = file_location(self.location(), action["path"], self.options())
        t = read_parquet(loc, name)            # FileNotFoundError names the file (read(): data loss)
        n = t.num_rows
        cols = conform(t, base, action.get("partitionValues"))
        if kind == "cdc":
            change = t.column("_change_type").cast(pa.string())
        else:
            change = pa.array([kind] * n, pa.string())
        cols += [change, pa.array([version] * n, pa.int64()), pa.array([ts_ms * 1000] * n, pa.int64()).cast(_ts())]
        return pa.Table.from_arrays(cols, schema=pa.schema(list(base) + change_fields()))

    def backlog(self, end: Any) -> dict[str, Any] | None:
        try:
            return {"versions_pending": max(self._latest_version() - int(end["version"]), 0)}
        except Exception:  # noqa: BLE001 - lag is advisory
            return None


def _cdf_on(conf: dict | None) -> bool:
    return str((conf or {}).get("delta.enableChangeDataFeed", "false")).lower() == "true"


def _version_range(by_version: dict[int, Any]) -> list[int] | None:
    return [min(by_version), max(by_version)] if by_version else None

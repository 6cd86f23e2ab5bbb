"""In-memory state store provider: a dict plus a sorted key index, versioned as delta files
with a full snapshot every ``snapshot_interval`` versions.

Commit of version N (each step leaves N-1 loadable, see state.base):
  1. prepare: drop in-flight temp files, files of versions > N and a stale snapshot N
  2. write ``N.delta`` (the keys touched by the batch: new value or null = deleted),
     atomically -- from here N is committed
  3. if N % snapshot_interval == 0: write ``N.snapshot`` (all rows), atomically
  4. cleanup: delete versions no longer needed for the last ``retention_versions``

Loading V: if this provider holds V in memory (it committed or loaded it) reuse it;
otherwise rebuild from the newest snapshot <= V plus the deltas after it.
Abort restores the loaded version from an undo log (no copy of the state is taken).
"""
from __future__ import annotations

import os
import threading
from typing import Iterator

from . import files
from .base import StateMetrics, StateStore, StateStoreError, StateStoreProvider
from .sortedkeys import SortedKeys

_ROW_OVERHEAD = 120  # rough per-row cost of dict entry + bytes headers + index slot


class _Loaded:
    """The in-memory content of one (operator, partition) at ``version``."""

    def __init__(self, version: int, token: str, data: dict, index: SortedKeys):
        self.version, self.token, self.data, self.index = version, token, data, index
        self.bytes = sum(len(k) + len(v) for k, v in data.items())


class MemoryStateStore(StateStore):
    def __init__(self, provider: "MemoryStateStoreProvider", operator: str, partition: int,
                 loaded: _Loaded):
        self._provider, self.operator, self.partition = provider, operator, partition
        self._s = loaded
        self.version = loaded.version
        self._undo: dict[bytes, bytes | None] = {}
        self._bytes_at_load = loaded.bytes
        self._updated = self._removed = 0
        self._closed = False

    # -- reads -------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        return self._s.data.get(key)

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        g = self._s.data.get
        return [g(k) for k in keys]

    def range_scan(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        data = self._s.data
        for k in self._s.index.irange(start, end):
            v = data.get(k)
            if v is not None:
                yield k, v

    # -- writes ------------------------------------------------------------------------
    def put(self, key: bytes, value: bytes) -> None:
        s = self._s
        old = s.data.get(key)
        if key not in self._undo:
            self._undo[key] = old
        if old is None:
            s.index.add(key)
            s.bytes += len(key) + len(value)
        else:
            s.bytes += len(value) - len(old)
        s.data[key] = bytes(value)
        self._updated += 1

    def delete(self, key: bytes) -> None:
        s = self._s
        old = s.data.pop(key, None)
        if old is None:
            return
        if key not in self._undo:
            self._undo[key] = old
        s.index.discard(key)
        s.bytes -= len(key) + len(old)
        self._removed += 1

    # -- lifecycle ---------------------------------------------------------------------
    def commit(self, version: int) -> int:
        self._check_open()
        self._check_commit_version(version)
        token = self._provider._commit(self, version)
        self._s.version, self._s.token = version, token
        self.version = version
        self._undo.clear()
        self._bytes_at_load = self._s.bytes
        self._updated = self._removed = 0
        return version

    def _delta(self) -> tuple[list[bytes], list]:
        data = self._s.data
        keys = list(self._undo)
        return keys, [data.get(k) for k in keys]

    def abort(self) -> None:
        s = self._s
        for k, old in self._undo.items():
            if old is None:
                if s.data.pop(k, None) is not None:
                    s.index.discard(k)
            else:
                if k not in s.data:
                    s.index.add(k)
                s.data[k] = old
        self._undo.clear()
        s.bytes = self._bytes_at_load
        self._updated = self._removed = 0

    def metrics(self) -> StateMetrics:
        s = self._s
        return StateMetrics(len(s.data), self._updated, self._removed,
                            s.bytes + _ROW_OVERHEAD * len(s.data))

    def close(self) -> None:
        if not self._closed:
            self.abort()
            self._closed = True
            self._provider._release(self)

    def _check_open(self) -> None:
        if self._closed:
            raise StateStoreError(f"operator {self.operator!r} partition {self.partition}: "
                                  "store is closed")


class MemoryStateStoreProvider(StateStoreProvider):
    def __init__(self, checkpoint_dir: str, **conf):
        super().__init__(checkpoint_dir, **conf)
        self._loaded: dict[tuple[str, int], _Loaded] = {}
        self._active: dict[tuple[str, int], MemoryStateStore] = {}
        self._lock = threading.Lock()

    def _dir(self, operator: str, partition: int) -> str:
        return files.store_dir(self.checkpoint_dir, operator, partition)

    def latest_version(self, operator: str, partition: int) -> int:
        v = files.list_versions(self._dir(operator, partition))
        return max(v["delta"] | v["snapshot"], default=-1)

    def open(self, operator: str, partition: int, version: int) -> MemoryStateStore:
        """Open (operator, partition) at ``version``; a store previously opened for the same
        (operator, partition) is aborted and closed."""
        key = (operator, partition)
        with self._lock:
            prev = self._active.pop(key, None)
        if prev is not None:
            prev.close()
        cached = self._loaded.get(key)
        if cached is None or cached.version != version:
            self._loaded.pop(key, None)
            cached = self._rebuild(operator, partition, version)
            self._loaded[key] = cached
        store = MemoryStateStore(self, operator, partition, cached)
        with self._lock:
            self._active[key] = store
        return store

    def _rebuild(self, operator: str, partition: int, version: int) -> _Loaded:
        if version == -1:
            return _Loaded(-1, "", {}, SortedKeys())
        d = self._dir(operator, partition)
        try:
            snap, logs = files.plan_chain(files.list_versions(d), version, "delta")
            data: dict[bytes, bytes] = {}
            meta = {"token": ""}
            if snap >= 0:
                meta, keys, values = files.read_rows(os.path.join(d, f"{snap}.snapshot"))
                data = dict(zip(keys, values))
            for v in logs:
                meta, keys, values = files.read_rows(os.path.join(d, f"{v}.delta"))
                for k, val in zip(keys, values):
                    if val is None:
                        data.pop(k, None)
                    else:
                        data[k] = val
            if meta.get("rows", len(data)) != len(data):
                raise StateStoreError(f"row count {len(data)} != recorded {meta['rows']}")
        except (LookupError, OSError, ValueError, KeyError) as e:
            raise StateStoreError(f"cannot load state version {version} of operator "
                                  f"{operator!r} partition {partition} from {d}: {e}") from e
        return _Loaded(version, meta["token"], data, SortedKeys(sorted(data)))

    def _commit(self, store: MemoryStateStore, version: int) -> str:
        d = self._dir(store.operator, store.partition)
        os.makedirs(d, exist_ok=True)
        token = files.new_token()
        meta = {"version": version, "token": token, "rows": len(store._s.data)}
        self._prepare(d, version)
        keys, values = store._delta()
        files.write_rows(os.path.join(d, f"{version}.delta"), keys, values, meta)
        if version > 0 and version % self.snapshot_interval == 0:
            self._write_snapshot(d, version, store._s, meta)
        self._cleanup(d, version)
        return token

    @staticmethod
    def _prepare(d: str, version: int) -> None:
        files.remove_tmp(d)
        vs = files.list_versions(d)
        for kind in ("delta", "snapshot"):
            for v in sorted(vs[kind], reverse=True):
                if v > version or (kind == "snapshot" and v == version):
                    files.remove(os.path.join(d, f"{v}.{kind}"))

    @staticmethod
    def _write_snapshot(d: str, version: int, s: _Loaded, meta: dict) -> None:
        keys = list(s.index)
        files.write_rows(os.path.join(d, f"{version}.snapshot"), keys,
                         [s.data[k] for k in keys], meta)

    def _cleanup(self, d: str, version: int) -> None:
        vs = files.list_versions(d)
        bound = files.cleanup_plan(vs, version, self.retention_versions)
        for kind in ("delta", "snapshot"):
            for v in vs[kind]:
                if v < bound:
                    files.remove(os.path.join(d, f"{v}.{kind}"))

    def _release(self, store: MemoryStateStore) -> None:
        with self._lock:
            if self._active.get((store.operator, store.partition)) is store:
                del self._active[(store.operator, store.partition)]

    def close(self) -> None:
        for store in list(self._active.values()):
            store.close()
        self._loaded.clear()

"""RocksDB state store provider (rocksdict): a local working copy per (operator, partition)
plus versioned files in the checkpoint.

The working copy lives under ``local_dir`` (default: a directory in the system temp dir keyed
by the checkpoint path) and records, in its ``meta`` column family, the version and commit
token it holds.  A batch's writes are buffered in an overlay (so abort is free and the working
copy only ever holds committed versions); reads and ordered scans merge overlay and DB.

Commit of version N (each step leaves N-1 loadable, see state.base):
  1. prepare: drop temp files, files of versions > N, and stale N files
     (the snapshot N; without changelog checkpointing also the changelog N)
  2. changelog on:  write ``N.changelog`` (the batch's puts/deletes) atomically -- committed
  3. apply the overlay + meta to the working copy in one WriteBatch
  4. snapshot (changelog off: every version -- this is when N becomes committed; on: every
     ``snapshot_interval`` versions): RocksDB checkpoint of the working copy (local hard links,
     taken in the commit), copied to ``.tmp-*`` in the store dir, then renamed to ``N.snapshot``.
     With changelog checkpointing the copy runs on a background thread, as Spark's maintenance
     task uploads snapshots: N is already committed by its changelog, a snapshot only shortens
     replay, and a crash or failure mid-copy leaves a ``.tmp-*`` (removed by the next commit) and
     no snapshot. The next commit, open or close of the same (operator, partition) waits for it.
  5. cleanup: delete versions not needed to load the last ``retention_versions``

Loading V: if the working copy holds V with the checkpoint's token for V, reuse it (fast
path); otherwise wipe it, copy the newest snapshot s <= V whose changelogs s+1..V exist, and
replay those changelogs.  Only the overlay (one batch's changes) is held in memory.
"""
from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator

from rocksdict import BlockBasedOptions, Checkpoint, Options, ReadOptions, Rdict, WriteBatch

from . import files
from .base import StateMetrics, StateStore, StateStoreError, StateStoreProvider
from .sortedkeys import SortedKeys

_META_KEY = b"meta"
log = logging.getLogger("increments.state.rocksdb")


def _options() -> Options:
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    t = BlockBasedOptions()
    t.set_bloom_filter(10, False)
    o.set_block_based_table_factory(t)
    return o


class _Working:
    """An open working copy: the DB, its meta column family and the version it holds."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.db = Rdict(path, _options(), column_families={"meta": Options(raw_mode=True)})
        self.meta_cf = self.db.get_column_family_handle("meta")
        raw = self.db.get_column_family("meta").get(_META_KEY)
        m = json.loads(raw) if raw else {"version": -1, "token": "", "rows": 0}
        self.version, self.token, self.rows = m["version"], m["token"], m["rows"]

    def write(self, keys: list[bytes], values: list, version: int, token: str, rows: int) -> None:
        wb = WriteBatch(raw_mode=True)
        for k, v in zip(keys, values):
            if v is None:
                wb.delete(k)
            else:
                wb.put(k, v)
        meta = json.dumps({"version": version, "token": token, "rows": rows}).encode()
        wb.put(_META_KEY, meta, self.meta_cf)
        self.db.write(wb)
        self.version, self.token, self.rows = version, token, rows

    def close(self) -> None:
        # the column-family handle keeps the DB (and its LOCK) alive: drop it first
        self.meta_cf = None
        try:
            self.db.close()
        except Exception:
            pass


class RocksDBStateStore(StateStore):
    def __init__(self, provider: "RocksDBStateStoreProvider", operator: str, partition: int,
                 working: _Working):
        self._provider, self.operator, self.partition = provider, operator, partition
        self._w = working
        self.version = working.version
        self._overlay: dict[bytes, bytes | None] = {}
        self._okeys = SortedKeys()
        self._rows = working.rows
        self._updated = self._removed = 0
        self._obytes = 0
        self._closed = False

    # -- reads -------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        ov = self._overlay
        if key in ov:
            return ov[key]
        return self._w.db.get(key)

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        ov = self._overlay
        missing = [k for k in keys if k not in ov]
        found = dict(zip(missing, self._w.db.get(missing))) if missing else {}
        return [ov[k] if k in ov else found[k] for k in keys]

    def range_scan(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        ov = self._overlay
        okeys = self._okeys.irange(start, end) if ov else []
        ro = ReadOptions()
        if end is not None:
            ro.set_iterate_upper_bound(end)
        it = (self._w.db.items(from_key=start, read_opt=ro) if start is not None
              else self._w.db.items(read_opt=ro))
        i, n = 0, len(okeys)
        for dk, dv in it:
            while i < n and okeys[i] < dk:
                v = ov.get(okeys[i])
                if v is not None:
                    yield okeys[i], v
                i += 1
            if i < n and okeys[i] == dk:
                v = ov.get(dk)
                i += 1
                if v is not None:
                    yield dk, v
            elif dk in ov:   # written during this scan
                v = ov[dk]
                if v is not None:
                    yield dk, v
            else:
                yield dk, dv
        for k in okeys[i:]:
            v = ov.get(k)
            if v is not None:
                yield k, v

    # -- writes ------------------------------------------------------------------------
    def _exists(self, key: bytes) -> bool:
        ov = self._overlay
        if key in ov:
            return ov[key] is not None
        self._okeys.add(key)
        return self._w.db.get(key) is not None

    def put(self, key: bytes, value: bytes) -> None:
        if not self._exists(key):
            self._rows += 1
        self._overlay[key] = bytes(value)
        self._obytes += len(key) + len(value)
        self._updated += 1

    def delete(self, key: bytes) -> None:
        if self._exists(key):
            self._rows -= 1
            self._removed += 1
        self._overlay[key] = None

    # -- lifecycle ---------------------------------------------------------------------
    def commit(self, version: int) -> int:
        if self._closed:
            raise StateStoreError(f"operator {self.operator!r} partition {self.partition}: "
                                  "store is closed")
        self._check_commit_version(version)
        keys = list(self._overlay)
        self._provider._commit(self, version, keys, [self._overlay[k] for k in keys], self._rows)
        self.version = version
        self.abort()
        return version

    def abort(self) -> None:
        self._overlay = {}
        self._okeys = SortedKeys()
        self._rows = self._w.rows
        self._updated = self._removed = self._obytes = 0

    def metrics(self) -> StateMetrics:
        db = self._w.db
        used = ((db.property_int_value("rocksdb.estimate-live-data-size") or 0)
                + (db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0) + self._obytes)
        return StateMetrics(self._rows, self._updated, self._removed, used)

    def close(self) -> None:
        if not self._closed:
            self.abort()
            self._closed = True
            self._provider._release(self)


class RocksDBStateStoreProvider(StateStoreProvider):
    """Extra conf: ``local_dir`` for working copies (default: temp dir keyed by checkpoint)."""

    def __init__(self, checkpoint_dir: str, *, local_dir: str | None = None, **conf):
        super().__init__(checkpoint_dir, **conf)
        if local_dir is None:
            h = hashlib.sha1(os.path.abspath(checkpoint_dir).encode()).hexdigest()[:16]
            local_dir = os.path.join(tempfile.gettempdir(), "increments-state", h)
        self.local_dir = local_dir
        self._working: dict[tuple[str, int], _Working] = {}
        self._verified: dict[tuple[str, int], tuple[int, str]] = {}
        self._active: dict[tuple[str, int], RocksDBStateStore] = {}
        self._lock = threading.Lock()
        self._uploads: dict[tuple[str, int], Future] = {}     # background snapshot copies
        self._uploader: ThreadPoolExecutor | None = None

    def _dir(self, operator: str, partition: int) -> str:
        return files.store_dir(self.checkpoint_dir, operator, partition)

    def _wpath(self, operator: str, partition: int) -> str:
        return os.path.join(self.local_dir, operator, str(partition), "db")

    def latest_version(self, operator: str, partition: int) -> int:
        v = files.list_versions(self._dir(operator, partition))
        return max(v["changelog"] | v["snapshot"], default=-1)

    def open(self, operator: str, partition: int, version: int) -> RocksDBStateStore:
        """Open (operator, partition) at ``version``; a store previously opened for the same
        (operator, partition) is aborted and closed."""
        key = (operator, partition)
        with self._lock:
            prev = self._active.pop(key, None)
        if prev is not None:
            prev.close()
        self._await_upload(key)
        try:
            w = self._working.get(key)
            if w is None:
                w = self._open_working(operator, partition)
            if not self._is_current(key, w, version):
                w = self._rebuild(operator, partition, version)
        except StateStoreError:
            raise
        except Exception as e:
            raise StateStoreError(f"cannot load state version {version} of operator "
                                  f"{operator!r} partition {partition}: {e}") from e
        store = RocksDBStateStore(self, operator, partition, w)
        with self._lock:
            self._active[key] = store
        return store

    def _open_working(self, operator: str, partition: int) -> _Working:
        path = self._wpath(operator, partition)
        for stale in glob.glob(glob.escape(path) + ".ckpt-*"):   # local checkpoints of a crashed upload
            shutil.rmtree(stale, ignore_errors=True)
        try:
            w = _Working(path)
        except Exception as e:
            if "lock" in str(e).lower():
                raise StateStoreError(
                    f"the working copy {path} of operator {operator!r} partition {partition} is "
                    "in use by another provider or process (close it first, or pass local_dir)"
                ) from e
            shutil.rmtree(path, ignore_errors=True)   # unreadable working copy: start over
            w = _Working(path)
        self._working[(operator, partition)] = w
        return w

    def _is_current(self, key: tuple[str, int], w: _Working, version: int) -> bool:
        """Fast path: the working copy holds exactly the checkpoint's ``version``."""
        if version == -1 or w.version != version:
            return version == -1 and w.version == -1 and w.rows == 0
        if self._verified.get(key) == (version, w.token):
            return True
        ok = self._checkpoint_token(self._dir(*key), version) == w.token
        if ok:
            self._verified[key] = (version, w.token)
        return ok

    @staticmethod
    def _checkpoint_token(d: str, version: int) -> str | None:
        try:
            return files.read_meta(os.path.join(d, f"{version}.changelog"))["token"]
        except (OSError, KeyError, ValueError):
            pass
        try:
            with open(os.path.join(d, f"{version}.snapshot", "_meta.json")) as f:
                return json.load(f)["token"]
        except (OSError, KeyError, ValueError):
            return None

    def _rebuild(self, operator: str, partition: int, version: int) -> _Working:
        """Wipe the working copy and rebuild ``version`` from snapshot + changelogs."""
        key = (operator, partition)
        old = self._working.pop(key, None)
        if old is not None:
            old.close()
        self._verified.pop(key, None)
        path = self._wpath(operator, partition)
        shutil.rmtree(path, ignore_errors=True)
        d = self._dir(operator, partition)
        if version >= 0:
            try:
                snap, logs = files.plan_chain(files.list_versions(d), version, "changelog")
            except LookupError as e:
                raise StateStoreError(f"cannot load state version {version} of operator "
                                      f"{operator!r} partition {partition} from {d}: {e}") from e
            if snap >= 0:
                _copy_db(os.path.join(d, f"{snap}.snapshot"), path, link=True)
        w = self._open_working(operator, partition)
        if version >= 0:
            for v in logs:
                meta, keys, values = files.read_rows(os.path.join(d, f"{v}.changelog"))
                w.write(keys, values, v, meta["token"], meta["rows"])
            if w.version != version:
                raise StateStoreError(f"operator {operator!r} partition {partition}: rebuilt "
                                      f"version {w.version}, expected {version}")
            self._verified[key] = (version, w.token)
        return w

    # -- commit ------------------------------------------------------------------------
    def _commit(self, store: RocksDBStateStore, version: int, keys: list[bytes], values: list,
                rows: int) -> None:
        key = (store.operator, store.partition)
        self._await_upload(key)
        d = self._dir(*key)
        os.makedirs(d, exist_ok=True)
        token = files.new_token()
        meta = {"version": version, "token": token, "rows": rows}
        self._prepare(d, version)
        if self.changelog_checkpointing:
            files.write_rows(os.path.join(d, f"{version}.changelog"), keys, values, meta)
        self._apply_local(store._w, keys, values, meta)
        self._verified[key] = (version, token)
        if not self.changelog_checkpointing:   # the snapshot is what commits N: synchronous
            self._upload_snapshot(self._local_checkpoint(store._w, version), d, version, meta)
        elif version > 0 and version % self.snapshot_interval == 0:
            local = self._local_checkpoint(store._w, version)
            with self._lock:   # partitions commit concurrently (execution/state_manager.py)
                if self._uploader is None:
                    self._uploader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="increments-snapshot")
                self._uploads[key] = self._uploader.submit(self._upload_snapshot, local, d, version, meta)
        self._cleanup(d, version)

    def _await_upload(self, key: tuple[str, int]) -> None:
        """Wait for the background snapshot copy of (operator, partition), if any. A failed copy
        only means no snapshot for that version (it stays loadable from its changelogs)."""
        fut = self._uploads.pop(key, None)
        if fut is None:
            return
        err = fut.exception()
        if err is not None:
            log.warning("state snapshot of operator %r partition %d was not written (%s); the version "
                        "stays loadable from its changelogs", key[0], key[1], err)

    def _prepare(self, d: str, version: int) -> None:
        files.remove_tmp(d)
        vs = files.list_versions(d)
        for kind in ("changelog", "snapshot"):
            for v in sorted(vs[kind], reverse=True):
                stale_current = v == version and (kind == "snapshot" or not self.changelog_checkpointing)
                if v > version or stale_current:
                    files.remove(os.path.join(d, f"{v}.{kind}"))

    @staticmethod
    def _apply_local(w: _Working, keys: list[bytes], values: list, meta: dict) -> None:
        w.write(keys, values, meta["version"], meta["token"], meta["rows"])

    @staticmethod
    def _local_checkpoint(w: _Working, version: int) -> str:
        """A RocksDB checkpoint of the working copy as it is now (at `version`), beside it."""
        local = f"{w.path}.ckpt-{version}"
        shutil.rmtree(local, ignore_errors=True)
        Checkpoint(w.db).create_checkpoint(local)
        return local

    @staticmethod
    def _upload_snapshot(local: str, d: str, version: int, meta: dict) -> None:
        """Copy a local checkpoint to ``N.snapshot`` in the store dir (atomically); remove it."""
        tmp = files.tmp_path(d, f"{version}.snapshot")
        try:
            _copy_db(local, tmp, link=False, fsync=True)
            files.write_json(os.path.join(tmp, "_meta.json"), meta)
            files.replace(tmp, os.path.join(d, f"{version}.snapshot"))
            files.fsync_dir(d)
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def _cleanup(self, d: str, version: int) -> None:
        vs = files.list_versions(d)
        bound = files.cleanup_plan(vs, version, self.retention_versions)
        for kind in ("changelog", "snapshot"):
            for v in vs[kind]:
                if v < bound:
                    files.remove(os.path.join(d, f"{v}.{kind}"))

    def _release(self, store: RocksDBStateStore) -> None:
        with self._lock:
            if self._active.get((store.operator, store.partition)) is store:
                del self._active[(store.operator, store.partition)]

    def close(self) -> None:
        for store in list(self._active.values()):
            store.close()
        for key in list(self._uploads):
            self._await_upload(key)
        if self._uploader is not None:
            self._uploader.shutdown(wait=True)
            self._uploader = None
        for w in self._working.values():
            w.close()
        self._working.clear()
        self._verified.clear()


def _copy_db(src: str, dst: str, *, link: bool, fsync: bool = False) -> None:
    """Copy a RocksDB directory; immutable .sst files are hard-linked when ``link``."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name == "_meta.json":
            continue
        s, t = os.path.join(src, name), os.path.join(dst, name)
        if link and name.endswith(".sst"):
            try:
                os.link(s, t)
                continue
            except OSError:
                pass
        shutil.copyfile(s, t)
        if fsync:
            with open(t, "rb") as f:
                os.fsync(f.fileno())

"""RocksDB state store provider (rocksdict): a local working copy per (operator, partition)
(a cache, state.working) plus versioned files in the checkpoint (state.files).

A batch's writes are buffered in an overlay (so abort is free and the working copy only ever
holds committed versions); reads and ordered scans merge overlay and DB: RocksDBStateStore,
state/rocksdb_store.py.

Commit of version N under a fresh token T (each step leaves N-1 loadable, see state.base):
  1. changelog on: write ``N.T.changelog`` (the batch's puts/deletes, parent token, rows)
     create-only -- (N, T) is loadable from here
  2. ``_apply_local``: the overlay + meta (N, T, rows, lineage) go into the working copy in one WriteBatch
     (a range the batch emptied by ``pop_range_keys`` as one range tombstone: RocksDBStateStore.local_changes)
  3. snapshot -- changelog off: every version, synchronously (its ``_meta.json`` is what makes (N, T)
     loadable); changelog on: every ``snapshot_interval`` versions, on a background thread, as
     Spark's maintenance task uploads snapshots: the job takes a RocksDB checkpoint of the working
     copy (local hard links; it flushes the memtable, a few ms), and the next write to that working
     copy waits until it exists (``_await_checkpoint``), then ``_upload_snapshot`` writes its files
     under ``N.T.snapshot/`` and ``_meta.json`` last, all create-only (a local checkpoint hard-links
     the .sst files), then cleanup runs. A failed or interrupted copy only means no snapshot (N stays
     loadable from changelogs). Batches go on meanwhile; only the next snapshot of the same store
     and ``close`` wait for it.
  4. cleanup every ``snapshot_interval`` versions (state.filebacked).

Two snapshot formats (a small version as one Arrow file of rows, a larger one as a RocksDB
checkpoint): state/rocksdb_snapshots.py, which writes and reads them.

Loading (V, token): the working copy is reused when it holds (V, token) and the rows the
checkpoint records for it -- the token itself carries them (state.files.new_token), so with the
token known this costs no request to the store (tokens without rows, of earlier releases: one GET
of that version's meta, unless this provider committed or loaded it itself). Otherwise the working copy is
wiped and rebuilt from the lineage of (V, token): its snapshot (hard links from a local checkpoint)
plus the changelogs after it. Only the overlay (one batch's changes) is held in memory.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from increments import storage
from increments.storage import redact

from . import files
from .filebacked import FileBackedProvider
from .rocksdb_snapshots import (ROWS_SNAPSHOT_MAX, download_snapshot, local_checkpoint, rows_snapshot,
                                upload_snapshot)
from .rocksdb_store import RocksDBStateStore
from .working import Claim, Working, private_copy_path, private_store_dir, remove_leftovers

log = logging.getLogger("increments.state.rocksdb")


class RocksDBStateStoreProvider(FileBackedProvider):
    """Extra conf: ``local_dir``, the root of the local caches (storage.private_dir);
    ``rows_snapshot_max``, the most rows a version may hold to be snapshotted as rows (module doc;
    0: always a RocksDB checkpoint)."""
    log_kind = "changelog"
    #: through the class, so tests can make the upload fail or crash at it (tests/state/crash_commit.py)
    _upload_snapshot = staticmethod(upload_snapshot)

    def __init__(self, checkpoint, *, local_dir: str | None = None, rows_snapshot_max: int = ROWS_SNAPSHOT_MAX,
                 **conf):
        super().__init__(checkpoint, **conf)
        self.local_dir = local_dir
        self.rows_snapshot_max = int(rows_snapshot_max)
        self._root: str | None = None
        self._working: dict[tuple[str, int], Working] = {}
        self._claims: dict[tuple[str, int], Claim] = {}
        self._verified: dict[tuple[str, int], tuple[int, str, int]] = {}
        self._uploads: dict[tuple[str, int], Future] = {}     # background snapshot copies + cleanup
        self._rows_jobs: set[Future] = set()     # those of rows snapshots: they never read the working copy
        self._taken: dict[tuple[str, int], threading.Event] = {}   # set when the job's local checkpoint exists
        self._uploader: ThreadPoolExecutor | None = None

    @property
    def sync_cleanup(self) -> bool:
        return not self.changelog_checkpointing

    @property
    def root(self) -> str:
        if self._root is None:
            h = hashlib.sha1(self.checkpoint.url.encode()).hexdigest()[:16]
            self._root = storage.private_dir(self.local_dir, "state", h)
        return self._root

    # -- open ----------------------------------------------------------------------------------------
    def _load(self, operator: str, partition: int, version: int, token: str | None) -> RocksDBStateStore:
        key = (operator, partition)
        w = self._working.get(key)
        if w is None:
            w = self._open_working(operator, partition)
        if not self._is_current(key, w, version, token):
            w = self._rebuild(operator, partition, version, token)
        self._lineages[key] = dict(w.lineage)
        return RocksDBStateStore(self, operator, partition, w)

    def is_cached(self, operator: str, partition: int, version: int, token: str | None) -> bool:
        key = (operator, partition)
        w = self._working.get(key)
        return (w is not None and token is not None and version >= 0 and w.version == version
                and w.token == token and self._verified.get(key) == (version, token, w.rows))

    def warm(self, operator: str, partition: int) -> None:
        """Open the working copy of (operator, partition) as it stands (opening or creating a
        RocksDB takes milliseconds of fsyncs); the first open() then only checks which version it
        holds (``_load``: it is rebuilt unless it holds exactly the version asked for)."""
        if (operator, partition) not in self._working:
            self._open_working(operator, partition)

    def _open_working(self, operator: str, partition: int, fill=None) -> Working:
        """Open this provider's working copy of the store: ``db`` when it can claim the store
        directory, else a private per-process copy (state.working). With ``fill``, the copy is
        wiped and ``fill(path)`` puts the files of a snapshot there before it is opened."""
        key = (operator, partition)
        claim = self._claims.get(key)
        if claim is None:                       # first use by this provider: check, then claim the directory
            claim = self._claims[key] = Claim(private_store_dir(self.root, operator, partition))
            if claim.held:
                remove_leftovers(claim.directory)
        directory = claim.directory
        places = [(os.path.join(directory, "db"), False)] if claim.held else []
        places.append((private_copy_path(directory), True))
        for path, private in places:
            fresh = fill is not None or private
            if fresh:
                shutil.rmtree(path, ignore_errors=True)
                os.makedirs(path, mode=0o700)
                if fill is not None:
                    fill(path)
            try:
                w = Working(path, private=private)
            except Exception as e:  # noqa: BLE001
                if "lock" in str(e).lower() and not private:
                    continue                        # held by a process that does not claim: go private
                if fresh:
                    raise
                shutil.rmtree(path, ignore_errors=True)   # an unreadable working copy: start over
                w = Working(path, private=private)
            self._working[key] = w
            return w
        raise AssertionError("unreachable")

    def _is_current(self, key: tuple[str, int], w: Working, version: int, token: str | None) -> bool:
        """Whether the working copy holds exactly (version, token) of the checkpoint."""
        if version < 0:
            return w.version == -1 and w.is_empty()
        if w.version != version or (token is not None and w.token != token):
            return False
        if self._verified.get(key) == (version, w.token, w.rows):
            return True
        if self.resolve(*key, version, token) != w.token:
            return False
        rows = files.token_rows(w.token)          # the authoritative token vouches for its rows
        if rows is None:
            rows = self._recorded_rows(self.store_loc(*key), version, w.token)
        if rows != w.rows:
            return False
        self._verified[key] = (version, w.token, w.rows)
        return True

    def _recorded_rows(self, loc, version: int, token: str) -> int | None:
        """The row count the checkpoint records for (version, token): from its changelog, else
        its snapshot's meta; None when neither exists. A derived token: its base version's."""
        base, k = files.split_token(token)
        version, token = version - k, base
        if version < 0:
            return 0
        reads = [lambda: files.decode_meta(loc.read_bytes(files.log_name(version, token, "changelog"))),
                 lambda: json.loads(loc.read_bytes(f"{files.snapshot_name(version, token)}/{files.META}"))]
        for read in (reads if self.changelog_checkpointing else reads[::-1]):
            try:
                meta = read()
            except FileNotFoundError:
                continue
            if meta.get("version") == version and meta.get("token") == token:
                return int(meta["rows"])
        return None

    def _rebuild(self, operator: str, partition: int, version: int, token: str | None) -> Working:
        """Wipe the working copy and rebuild (version, token) from its lineage's snapshot + changelogs."""
        key = (operator, partition)
        self._verified.pop(key, None)
        tr = None
        if version >= 0:
            token, tr = self.trace(operator, partition, version, token)
        old = self._working.get(key)
        if old is not None:
            self._await_checkpoint(old)          # the background job may still be taking it
            self._working.pop(key, None)
            if old.private:
                self._await_upload(key)          # its local checkpoint lies inside the private copy
            old.close()
        if tr is None:
            return self._open_working(operator, partition, fill=lambda path: None)
        loc = self.store_loc(operator, partition)
        rows = [0]
        snapshot_rows: list = [None]

        def fill(path: str) -> None:
            if tr.snapshot is not None:
                rows[0], snapshot_rows[0] = download_snapshot(loc, tr.snapshot,
                                                              tr.listing.snapshots[tr.snapshot], path)

        w = self._open_working(operator, partition, fill=fill)
        if snapshot_rows[0] is not None:                 # a rows snapshot: written into the fresh copy
            keys, values = snapshot_rows[0]
            w.write(keys, values, tr.snapshot[0], tr.snapshot[1], rows[0], tr.lineage)
        for meta, keys, values in tr.logs:
            w.write(keys, values, meta["version"], meta["token"], meta["rows"], tr.lineage)
            rows[0] = meta["rows"]
        w.write([], [], version, token, rows[0], tr.lineage)
        self._verified[key] = (version, token, rows[0])
        return w

    # -- commit ----------------------------------------------------------------------------------------
    def _write_version(self, store: RocksDBStateStore, meta: dict, keys: list[bytes], values: list,
                       lineage: dict[int, str]) -> None:
        key = (store.operator, store.partition)
        loc = self.store_loc(*key)
        version = meta["version"]
        if self.changelog_checkpointing:
            files.put(loc, files.log_name(version, meta["token"], "changelog"), files.encode_rows(keys, values, meta))
        self._apply_local(store._w, *store.local_changes(keys, values), meta, lineage)
        self._verified[key] = (version, meta["token"], meta["rows"])
        if not self.changelog_checkpointing:   # the snapshot is what makes (N, T) loadable: synchronous
            rows = rows_snapshot(store._w, meta, self.rows_snapshot_max)
            self._upload_snapshot(rows if rows is not None else
                                  local_checkpoint(store._w, version, loc, meta["token"]), loc, meta)
        elif self.cleanup_due(version):
            self._await_upload(key)            # the previous one, normally long done: one at a time per store
            rows = rows_snapshot(store._w, meta, self.rows_snapshot_max)      # read now: the copy holds exactly N
            # else set once the job's local checkpoint of version N exists
            taken = threading.Event() if rows is None else None
            with self._lock:   # partitions commit concurrently (execution/state_manager.py)
                if self._uploader is None:
                    # several stores at once: a store's next write waits for its own checkpoint
                    # only, never behind another store's upload (one job at a time per store:
                    # _await_upload above)
                    self._uploader = ThreadPoolExecutor(max_workers=4, thread_name_prefix="increments-snapshot")
                if taken is not None:
                    self._taken[key] = taken
                job = self._uploads[key] = self._uploader.submit(self._snapshot_then_cleanup, store._w, taken, loc,
                                                                 meta, key, rows)
                if rows is not None:
                    self._rows_jobs.add(job)
                    job.add_done_callback(self._rows_jobs.discard)

    def _keep_version(self, store: RocksDBStateStore, meta: dict, lineage: dict[int, str]) -> None:
        self._apply_local(store._w, [], [], [], meta, lineage)
        self._verified[(store.operator, store.partition)] = (meta["version"], meta["token"], meta["rows"])

    def _apply_local(self, w: Working, keys: list[bytes], values: list, ranges: list, meta: dict,
                     lineage: dict[int, str]) -> None:
        self._await_checkpoint(w)
        w.write(keys, values, meta["version"], meta["token"], meta["rows"], lineage, ranges)

    def _await_checkpoint(self, w: Working) -> None:
        """Wait until the background job has taken its local checkpoint of the working copy `w` (a
        RocksDB checkpoint flushes the memtable: a few ms, once per snapshot_interval versions, off
        the commit). Nothing may write to or close a working copy before: the checkpoint must hold
        exactly the version it is named after."""
        with self._lock:
            pending = [(k, e) for k, e in self._taken.items() if self._working.get(k) is w]
        for k, e in pending:
            e.wait()
            with self._lock:
                if self._taken.get(k) is e:
                    del self._taken[k]

    def _snapshot_then_cleanup(self, w: Working, taken: threading.Event | None, loc, meta: dict,
                               key: tuple[str, int], rows: bytes | None = None) -> None:
        """The background job: a local checkpoint of the working copy as the commit left it (the
        next write to it waits for `taken`, see _await_checkpoint), then the upload from that
        checkpoint and the cleanup, which read only the checkpoint and the lineage map, so the
        store goes on with the next batches meanwhile. With ``rows`` (a rows snapshot, read at
        commit) no checkpoint is taken and nothing waits."""
        try:
            if rows is None:
                try:
                    local = local_checkpoint(w, meta["version"], loc, meta["token"])
                finally:
                    taken.set()
            self._upload_snapshot(local if rows is None else rows, loc, meta)
        except Exception as e:  # noqa: BLE001
            log.warning("state snapshot of operator %r partition %d was not written (%s); the version "
                        "stays loadable from its changelogs", key[0], key[1], redact(e))
        finally:
            self._cleanup(*key, meta["version"])

    def _close_working(self, key: tuple[str, int], w: Working) -> None:
        """Close the working copy of `key` and wait for its snapshot job: a rows snapshot's job
        (its rows read at commit) runs on while the copy closes; a RocksDB checkpoint's job may
        still read the copy (and a private copy's close removes the checkpoint beside it), so
        the copy is closed after it."""
        job = self._uploads.get(key)
        if job is None or job in self._rows_jobs:
            w.close()
            self._await_upload(key)
        else:
            self._await_upload(key)
            w.close()

    def _await_upload(self, key: tuple[str, int]) -> None:
        """Wait for the background snapshot copy of (operator, partition), if any. A failed copy
        only means no snapshot for that version (it stays loadable from its changelogs)."""
        fut = self._uploads.pop(key, None)
        if fut is not None:
            fut.exception()

    def _close(self) -> None:
        """Close every working copy and wait for every snapshot job (``_close_working``: rocksdict
        flushes the memtable and syncs the WAL there, with the GIL released), the stores side by
        side, the first on this thread; then the claims are released (also when a close failed)."""
        items = list(self._working.items())
        pool = (ThreadPoolExecutor(max_workers=min(8, len(items) - 1), thread_name_prefix="increments-state-close")
                if len(items) > 1 else None)
        try:
            futures = [pool.submit(self._close_working, k, w) for k, w in items[1:]] if pool is not None else []
            try:
                if items:
                    self._close_working(*items[0])
            finally:
                for f in futures:
                    f.exception()
            for f in futures:
                f.result()
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
            for key in list(self._uploads):          # of working copies already replaced
                self._await_upload(key)
            if self._uploader is not None:
                self._uploader.shutdown(wait=True)
                self._uploader = None
            self._working.clear()
            self._taken.clear()
            for c in self._claims.values():
                c.release()
            self._claims.clear()
            self._verified.clear()

"""The bookkeeping both providers share: where a store's files live, open/release/close of stores,
token resolution, loading by lineage, and retention cleanup. A provider only loads, writes and
snapshots (``_load``, ``_write_version`` and what they call).

Commit of version N by a store loaded at (N-1, parent token), in every provider:
  0. no changes and N not due for a snapshot: no file at all; T = files.derived_token(parent)
     ("the content of the parent's base version"), recorded by the commit log like any token
     (``_keep_version``); steps 1-3 are skipped. The version is as durable as its base.
  1. a fresh token T; meta = {version: N, token: T, parent, rows}
  2. ``_write_version``: the provider writes N's files create-only under names carrying (N, T)
     (its log, and its snapshot when due; with RocksDB the snapshot may follow in the background).
     From the first complete file on, (N, T) is loadable; the commit log decides whether it counts.
  3. every ``snapshot_interval`` versions: cleanup (one LIST, deletes below the lineage bound,
     see files.cleanup_bound). A failed cleanup only leaves files behind; it never fails a commit.
Nothing is ever overwritten or deleted at or above the bound, so a redo or a zombie attempt of N
cannot harm the attempt the commit log names.
"""
from __future__ import annotations

import logging
import os
import shutil
import threading
import time

from increments.storage import redact

from . import files
from .base import StateStore, StateStoreError, StateStoreProvider

log = logging.getLogger("increments.state")


class FileBackedProvider(StateStoreProvider):
    log_kind = "delta"       # the name of a version's log file: "delta" (memory) or "changelog" (rocksdb)
    sync_cleanup = True      # cleanup in the commit (False: the provider runs it, e.g. after a background upload)

    def __init__(self, checkpoint, **conf):
        super().__init__(checkpoint, **conf)
        self._active: dict[tuple[str, int], StateStore] = {}
        # per store: {version: token} of its lineage, from the loaded snapshot (or 0) to its version
        # (the last retention + 2 * snapshot_interval versions); replaced on commit, never mutated
        self._lineages: dict[tuple[str, int], dict[int, str]] = {}
        self._lock = threading.Lock()

    # -- places -----------------------------------------------------------------------------------
    def store_loc(self, operator: str, partition: int):
        return self.checkpoint.child("state", operator, str(partition))

    @staticmethod
    def where(operator: str, partition: int) -> str:
        return f"operator {operator!r} partition {partition}"

    def listing(self, operator: str, partition: int) -> files.Listing:
        return files.list_store(self.store_loc(operator, partition))

    def latest_version(self, operator: str, partition: int) -> int:
        """The newest version any attempt wrote files for (one LIST); unchanged versions have none."""
        return self.listing(operator, partition).latest()

    # -- open ---------------------------------------------------------------------------------------
    def open(self, operator: str, partition: int, version: int, token: str | None = None) -> StateStore:
        """Open (operator, partition) at (version, token); a store previously opened for the same
        (operator, partition) by this provider is aborted and closed first."""
        key = (operator, partition)
        with self._lock:
            prev = self._active.pop(key, None)
        if prev is not None:
            prev.close()
        try:
            store = self._load(operator, partition, version, token)
        except StateStoreError:
            raise
        except Exception as e:  # noqa: BLE001  (storage, Arrow, RocksDB and JSON errors alike)
            raise StateStoreError(f"cannot load state version {version} of {self.where(operator, partition)} "
                                  f"from {self.store_loc(operator, partition).url}: {redact(e)}") from e
        with self._lock:
            self._active[key] = store
        return store

    def _load(self, operator: str, partition: int, version: int, token: str | None) -> StateStore:
        raise NotImplementedError

    def trace(self, operator: str, partition: int, version: int, token: str | None) -> tuple[str, files.Trace]:
        """(token, how to build it) for (version, token): one LIST, then the logs back to a snapshot."""
        loc = self.store_loc(operator, partition)
        listing = files.list_store(loc)
        where = self.where(operator, partition)
        tok = files.resolve_token(listing, version, token, where)
        return tok, files.trace(loc, listing, version, tok, self.log_kind, where)

    def resolve(self, operator: str, partition: int, version: int, token: str | None) -> str:
        """The token of ``version``: ``token`` itself, else the only candidate (one LIST)."""
        if token is not None or version < 0:
            return token or ""
        return files.resolve_token(self.listing(operator, partition), version, None, self.where(operator, partition))

    # -- commit --------------------------------------------------------------------------------------
    def _commit(self, store: StateStore, version: int, keys: list[bytes], values: list, rows: int) -> str:
        """Steps 1-3 of the module doc; returns the new token."""
        key = (store.operator, store.partition)
        unchanged = not keys and not self.cleanup_due(version)
        token = files.derived_token(store.token) if unchanged else files.new_token(rows)
        meta = {"version": version, "token": token, "parent": store.token, "rows": rows}
        keep = version - self.retention_versions - 2 * self.snapshot_interval   # older entries cannot be a bound
        lineage = dict(self._lineages.get(key, {}))      # a new map: background cleanups may read the old one
        if lineage and min(lineage) < keep:
            lineage = {v: t for v, t in lineage.items() if v >= keep}
        lineage[version] = token
        if unchanged:
            self._keep_version(store, meta, lineage)
        else:
            self._write_version(store, meta, keys, values, lineage)
        self._lineages[key] = lineage
        if self.sync_cleanup and self.cleanup_due(version):
            self._cleanup(store.operator, store.partition, version)
        return token

    def _write_version(self, store: StateStore, meta: dict, keys: list[bytes], values: list,
                       lineage: dict[int, str]) -> None:
        raise NotImplementedError

    def _keep_version(self, store: StateStore, meta: dict, lineage: dict[int, str]) -> None:
        """An unchanged version (derived token, no file: see state.files): the provider's own
        bookkeeping only (RocksDB: the working copy's meta)."""

    def cleanup_due(self, version: int) -> bool:
        return version > 0 and version % self.snapshot_interval == 0

    def _cleanup(self, operator: str, partition: int, version: int) -> None:
        """Delete the objects of every attempt of the versions below this store's lineage bound
        (files.cleanup_bound). Failures are logged: old files only cost space. May run on a
        background thread: it only reads the lineage map (which commits replace, never mutate)."""
        key = (operator, partition)
        loc = self.store_loc(operator, partition)
        lineage = self._lineages.get(key, {})
        try:
            listing = files.list_store(loc)
            bound = files.cleanup_bound(listing, version, self.retention_versions, lineage)
            for name in listing.objects_below(bound):
                loc.delete(name)
            if loc.is_local:                      # the emptied directories, and temp files a crash left there
                for d in listing.dirs_below(bound):
                    loc.delete_prefix(d + "/")
                _remove_stale_temp_files(loc.local_path())
        except Exception as e:  # noqa: BLE001
            log.warning("state cleanup of %s in %s failed (%s); old versions stay until the next cleanup",
                        self.where(operator, partition), loc.url, redact(e))

    # -- release / close -------------------------------------------------------------------------------
    def _release(self, store: StateStore) -> None:
        with self._lock:
            if self._active.get((store.operator, store.partition)) is store:
                del self._active[(store.operator, store.partition)]

    def close(self) -> None:
        """Abort and close every open store, then the provider's own resources (``_close``)."""
        for store in list(self._active.values()):
            store.close()
        self._close()
        self._lineages.clear()

    def _close(self) -> None:
        pass


def _remove_stale_temp_files(directory: str, age_s: float = 3600.0) -> None:
    """Temp files of local writes and temp directories of RocksDB snapshots (``.tmp-*``) a killed
    process left, once an hour old (a live write is never that old; a younger one may belong to an
    attempt still writing)."""
    cutoff = time.time() - age_s
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for e in entries:
        try:
            if not e.name.startswith(".tmp-") or e.stat(follow_symlinks=False).st_mtime >= cutoff:
                continue
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                os.remove(e.path)
        except FileNotFoundError:
            pass

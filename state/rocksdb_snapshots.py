"""The snapshots of the RocksDB provider (state/rocksdb_provider.py): taking one from a working
copy, writing it into the checkpoint, and reading it back into a fresh working copy.

Two snapshot formats, both under ``N.T.snapshot/`` with ``_meta.json`` last (its ``format`` says
which): a small version (at most ``rows_snapshot_max`` rows, 4096 by default, and 4 MiB of keys and
values) is read out of the working copy right after step 2 and written as one Arrow file
``rows.arrow`` (the changelog's encoding, ``format: "rows"``); a larger one is a RocksDB checkpoint
(``format`` absent). rocksdict holds the GIL through a checkpoint (its memtable flush and fsyncs, 2-3
ms even for a few hundred rows) and every thread of the process waits; reading 4096 rows takes
about 1.5 ms, and loading the rows format writes them into a fresh working copy in one WriteBatch.

Written under ``N.T.snapshot/`` of the store's location, every object create-only, ``_meta.json``
last: a ``_meta.json`` implies every file of the snapshot (upload_snapshot says how, per storage).
"""
from __future__ import annotations

import json
import os
import shutil

from rocksdict import Checkpoint

from . import files
from .base import StateStoreError
from .working import Working, copy_db

ROWS_SNAPSHOT_MAX = 4096             # default rows_snapshot_max (module doc: the two snapshot formats)
ROWS_SNAPSHOT_MAX_BYTES = 4 << 20
ROWS_FILE = "rows.arrow"


def rows_snapshot(w: Working, meta: dict, max_rows: int) -> bytes | None:
    """Version N (the working copy as the commit left it) encoded as a rows snapshot, or None
    when it is too large for one: more than `max_rows` rows (the provider's
    rows_snapshot_max) or ROWS_SNAPSHOT_MAX_BYTES of keys and values (module doc)."""
    if meta["rows"] > max_rows:
        return None
    kv = w.items(max_rows, ROWS_SNAPSHOT_MAX_BYTES)
    if kv is None or len(kv[0]) != meta["rows"]:
        return None
    return files.encode_rows(kv[0], kv[1], meta)


def local_checkpoint(w: Working, version: int, loc=None, token: str = "") -> str:
    """A RocksDB checkpoint of the working copy as it is now (at `version`): when the store
    ``loc`` is on the local disk, inside the store directory as ``.tmp-<v>.<token>.snapshot``
    (a temp name every listing skips; upload_snapshot renames it), else beside the working copy."""
    store_dir = loc.local_path() if loc is not None and loc.is_local else None
    if store_dir is not None:
        os.makedirs(store_dir, exist_ok=True)
        local = os.path.join(store_dir, ".tmp-" + files.snapshot_name(version, token))
    else:
        local = f"{w.path}.ckpt-{version}"
    shutil.rmtree(local, ignore_errors=True)
    Checkpoint(w.db).create_checkpoint(local)
    return local


def upload_snapshot(local: str | bytes, loc, meta: dict) -> None:
    """Make the local checkpoint ``local`` the snapshot ``N.T.snapshot/`` of the store ``loc``,
    ``_meta.json`` written last, every object create-only; ``local`` is gone afterwards.

    * ``local`` as bytes: a rows snapshot (module doc): ``rows.arrow``, then ``_meta.json``
      with ``format: "rows"`` (each files.put: its own fsync; on the local disk one directory
      fsync, after ``_meta.json``'s link, which makes both names durable: files.put ``more``).

    * ``local`` inside the store directory (``.tmp-N.T.snapshot``, see local_checkpoint): each
      non-.sst file is fsynced (RocksDB syncs its table files), the directory is renamed to
      ``N.T.snapshot`` (a name no other attempt uses: the token is fresh), then the snapshot
      directory and the store directory are fsynced, then ``_meta.json`` is written (files.put:
      its own fsync and directory fsync). No file is copied or linked again.
    * else, store on the local disk: every file is hard-linked into ``N.T.snapshot/`` (``link``
      fails when the name exists), the non-.sst ones fsynced, the two directories fsynced, then
      ``_meta.json``; a file that cannot be linked (another file system) is copied with files.put.
    * store on an object store: each file with files.put, then ``_meta.json``.
    So after a crash or a power loss a ``_meta.json`` implies every file of the snapshot and its
    directory entry (3 directory fsyncs per snapshot, not one per file); a crash before leaves
    a partial snapshot (no ``_meta.json``: ignored, removed by cleanup) or a ``.tmp-`` directory
    (never listed; removed by cleanup once an hour old)."""
    prefix = files.snapshot_name(meta["version"], meta["token"]) + "/"
    if isinstance(local, bytes):
        files.put(loc, prefix + ROWS_FILE, local, more=True)
        files.put(loc, prefix + files.META, json.dumps(dict(meta, format="rows")).encode())   # last
        return
    try:
        target = loc.local_path(prefix)
        if target is not None and os.path.dirname(local) == os.path.dirname(target.rstrip("/")):
            for name in os.listdir(local):
                if not name.endswith(".sst"):
                    _fsync_path(os.path.join(local, name), os.O_RDONLY)
            os.rename(local, target.rstrip("/"))
            _fsync_path(target, os.O_RDONLY)
            _fsync_path(os.path.dirname(target.rstrip("/")), os.O_RDONLY)
            files.put(loc, prefix + files.META, json.dumps(meta).encode())   # last: the snapshot is complete
            return
        linked = False
        for name in sorted(os.listdir(local)):
            src = os.path.join(local, name)
            if target is not None:
                os.makedirs(target, exist_ok=True)
                dst = os.path.join(target, name)
                try:
                    os.link(src, dst)                  # fails when the name exists
                except FileExistsError:
                    raise
                except OSError:
                    pass                               # another file system: copy
                else:
                    linked = True
                    if not name.endswith(".sst"):
                        _fsync_path(dst, os.O_RDONLY)
                    continue
            with open(src, "rb") as f:
                files.put(loc, prefix + name, f.read())
        if linked:
            _fsync_path(target, os.O_RDONLY)                      # the links
            _fsync_path(os.path.dirname(target.rstrip("/")), os.O_RDONLY)   # the snapshot directory
        files.put(loc, prefix + files.META, json.dumps(meta).encode())   # last: the snapshot is complete
    finally:
        shutil.rmtree(local, ignore_errors=True)


def download_snapshot(loc, snap: tuple[int, str], names: list[str], path: str) -> tuple[int, tuple | None]:
    """Fill the (empty) working copy directory ``path`` with the snapshot's files: (its rows,
    None); a rows snapshot leaves ``path`` empty and returns (its rows, (keys, values))."""
    prefix = files.snapshot_name(*snap) + "/"
    meta = json.loads(loc.read_bytes(prefix + files.META))
    if meta.get("version") != snap[0] or (snap[1] and meta.get("token") != snap[1]):
        raise StateStoreError(f"{loc.join(prefix + files.META)} records version {meta.get('version')} "
                              f"token {meta.get('token')}, not {snap[0]} {snap[1]}")
    if meta.get("format") == "rows":
        inner, keys, values = files.decode_rows(loc.read_bytes(prefix + ROWS_FILE))
        if inner.get("version") != meta["version"] or len(keys) != int(meta["rows"]):
            raise StateStoreError(f"{loc.join(prefix + ROWS_FILE)} holds version {inner.get('version')} with "
                                  f"{len(keys)} rows, not version {meta['version']} with {meta['rows']} as "
                                  f"{files.META} records")
        return int(meta["rows"]), (keys, values)
    local = loc.local_path(prefix)
    if local is not None:
        copy_db(local, path, link=True)
    else:
        for name in names:
            rel = name[len(prefix):]
            if rel == files.META or "/" in rel:
                continue
            with open(os.path.join(path, rel), "wb") as f:
                f.write(loc.read_bytes(name))
    return int(meta["rows"]), None


def _fsync_path(path: str, flags: int) -> None:
    """fsync a file or a directory by path (errors propagate: a snapshot that cannot be made
    durable is not completed)."""
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

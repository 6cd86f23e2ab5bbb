"""RocksDB working copies: local caches of the checkpoint's state, never the source of truth.

Layout: ``<root>/<operator>/<partition>/db`` where root = ``storage.private_dir(local_dir, "state",
sha1(checkpoint url)[:16])`` (0700, refused when another user owns it or others can write to it).

* The store directory ``<root>/<operator>/<partition>`` must be ours and not writable by others: one
  owned by another user is refused (StateStoreError); one others can write to is wiped and recreated
  0700 (whatever it held is not trusted).
* A provider *claims* the store directory with an exclusive ``flock`` on ``owner.lock`` (per open
  file, so two providers of one process conflict as two processes do). The claimant uses ``db``;
  a provider that finds it claimed (another runner of the same query, or a second provider) does
  not fail: it works in a private ``proc-<pid>-<random>/db`` beside it, removed on close (and by
  the next claimant when its process is gone). Which runner's result counts is decided by the
  commit log's fence, not by this lock.
* The working copy's ``meta`` column family records {version, token, rows} under ``meta`` and the
  lineage one key per version (``lineage:<8-byte big-endian version>`` -> token), so a commit
  writes the one new entry and deletes the ones retention let go, not the whole map (working
  copies of earlier releases kept the map in ``meta``; their first write moves it to keys); a provider
  reuses a working copy only when that matches the authoritative (version, token) and the rows the
  checkpoint records for it (state.rocksdb_provider); otherwise it is rebuilt from the checkpoint.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from collections import deque
from collections.abc import Sequence

from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch, WriteBufferManager

from .base import StateStoreError

_META_KEY = b"meta"
_LINEAGE = b"lineage:"


def _lineage_key(version: int) -> bytes:
    return _LINEAGE + version.to_bytes(8, "big")


#: Memory of every working copy of the process, bounded together (issue 28 item 10). RocksDB's
#: defaults are per DB and column family: a 32 MB block cache per DB and 64 MB memtables flushed
#: only when full. Nothing else flushes a working copy whose versions are snapshotted in the rows
#: format (no RocksDB checkpoint), so a long-running query's memtables took every batch's changes
#: (measured: +4 MB/min of resident memory at 800 rows/s). Instead: one LRU block cache and one
#: memtable budget (a WriteBufferManager: past it RocksDB flushes the largest memtable) shared by
#: all, and small memtables (a flush then writes a small L0 file into the local cache).
BLOCK_CACHE_BYTES = 16 << 20
MEMTABLE_BUDGET_BYTES = 32 << 20
MEMTABLE_BYTES = 4 << 20
_shared: dict[str, object] = {}


def _shared_memory() -> tuple[Cache, WriteBufferManager]:
    if not _shared:
        _shared["cache"] = Cache(BLOCK_CACHE_BYTES)
        _shared["wbm"] = WriteBufferManager(MEMTABLE_BUDGET_BYTES, False)
    return _shared["cache"], _shared["wbm"]  # type: ignore[return-value]


#: A working copy holding at most this many table files is opened by the calling thread alone
#: (``_options``); one with more by RocksDB's default of 16 threads.
FEW_TABLE_FILES = 16


def _table_files(path: str) -> int:
    """How many .sst files the directory holds (0 when it does not exist)."""
    try:
        with os.scandir(path) as it:
            return sum(1 for e in it if e.name.endswith(".sst"))
    except (FileNotFoundError, NotADirectoryError):
        return 0


def _options(path: str | None = None) -> Options:
    """The working copy's options. RocksDB opens a DB's table files at open on
    ``max_file_opening_threads`` threads (16 by default), which it starts and joins at every open
    even when there is no file to open: ~15 thread starts per open, ~0.5 ms of CPU with the GIL held
    (rocksdict holds it through the open). A working copy with at most FEW_TABLE_FILES table files
    (``path``'s, checked before the open: a new or small one) opens them on the calling thread."""
    cache, wbm = _shared_memory()
    o = _bounded(Options(raw_mode=True), wbm)
    if path is not None and _table_files(path) <= FEW_TABLE_FILES:
        o.set_max_file_opening_threads(1)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    t = BlockBasedOptions()
    t.set_bloom_filter(10, False)
    t.set_block_cache(cache)
    o.set_block_based_table_factory(t)
    return o


def _bounded(o: Options, wbm: WriteBufferManager) -> Options:
    o.set_write_buffer_size(MEMTABLE_BYTES)
    o.set_max_write_buffer_number(2)
    o.set_write_buffer_manager(wbm)
    return o


class Working:
    """An open working copy: the DB, its meta column family and the version it holds."""

    def __init__(self, path: str, private: bool = False):
        self.path, self.private = path, private
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        self.db = Rdict(path, _options(path), column_families={"meta": _bounded(Options(raw_mode=True), _shared_memory()[1])})
        self.meta_cf = self.db.get_column_family_handle("meta")
        cf = self.db.get_column_family("meta")
        raw = cf.get(_META_KEY)
        m = json.loads(raw) if raw else {}
        self.version = int(m.get("version", -1))
        self.token = str(m.get("token", ""))
        self.rows = int(m.get("rows", 0))
        self._keyed = "lineage" not in m      # False: an earlier release's map in meta, not yet in keys
        if self._keyed:
            n = len(_LINEAGE)
            self.lineage = {}
            for k, t in cf.items(from_key=_LINEAGE):
                if not k.startswith(_LINEAGE):
                    break
                self.lineage[int.from_bytes(k[n:], "big")] = t.decode()
        else:
            self.lineage = {int(v): str(t) for v, t in m["lineage"].items()}

    def write(self, keys: list[bytes], values: list, version: int, token: str, rows: int,
              lineage: dict[int, str], ranges: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """Apply the changes, the new meta and the lineage's changed entries in one WriteBatch.
        ``lineage`` is kept by reference: the caller replaces its lineage maps, never mutates them.
        ``ranges``: [start, end) ranges deleted whole (one range tombstone each) before the changes
        are applied; the caller leaves the keys they delete out of ``keys``."""
        wb = WriteBatch(raw_mode=True)
        for start, end in ranges:
            wb.delete_range(start, end)
        deletes = values.count(None)
        if deletes and deletes == len(values):     # an eviction: deletes only
            deque(map(wb.delete, keys), maxlen=0)
        elif deletes:
            for k, v in zip(keys, values):
                if v is None:
                    wb.delete(k)
                else:
                    wb.put(k, v)
        else:
            deque(map(wb.put, keys, values), maxlen=0)
        cf = self.meta_cf
        old = self.lineage if self._keyed else {}
        if lineage is not old:
            for v, t in lineage.items() - old.items():
                wb.put(_lineage_key(v), t.encode(), cf)
            for v in old.keys() - lineage.keys():
                wb.delete(_lineage_key(v), cf)
        wb.put(_META_KEY, json.dumps({"version": version, "token": token, "rows": rows}).encode(), cf)
        self.db.write(wb)
        self.version, self.token, self.rows, self.lineage = version, token, rows, lineage
        self._keyed = True

    def items(self, max_rows: int, max_bytes: int) -> tuple[list[bytes], list[bytes]] | None:
        """Every (key, value) of the data (not the meta column family), in key order; None as soon
        as there are more than ``max_rows`` rows or ``max_bytes`` of keys and values."""
        keys: list[bytes] = []
        values: list[bytes] = []
        size = 0
        it = self.db.iter()
        it.seek_to_first()
        while it.valid():
            k, v = it.key(), it.value()
            size += len(k) + len(v)
            if len(keys) >= max_rows or size > max_bytes:
                return None
            keys.append(k)
            values.append(v)
            it.next()
        return keys, values

    def is_empty(self) -> bool:
        return next(iter(self.db.keys()), None) is None

    def close(self) -> None:
        # the column-family handle keeps the DB (and its LOCK) alive: drop it first
        self.meta_cf = None
        try:
            self.db.close()
        except Exception:  # noqa: BLE001
            pass
        if self.private:
            shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


def private_store_dir(root: str, operator: str, partition: int) -> str:
    """``<root>/<operator>/<partition>``, checked as the module doc says."""
    path = os.path.join(root, operator, str(partition))
    for d in (os.path.join(root, operator), path):       # before anything is created through them
        if os.path.islink(d):
            raise StateStoreError(f"the RocksDB working directory {d} is a symbolic link (to {os.readlink(d)}); "
                                  "increments refuses to follow it (whoever planted it would choose where state is "
                                  "written and read). Remove it, or pass another local_dir.")
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise StateStoreError(f"the RocksDB working directory {path} belongs to user id {st.st_uid}, not to this "
                              f"user ({os.getuid()}); increments refuses to use state another user could change. "
                              "Remove it, or pass another local_dir.")
    if st.st_mode & 0o022:
        shutil.rmtree(path)
        os.makedirs(path, mode=0o700)
    return path


class Claim:
    """The exclusive claim of a store directory (an flock held until ``release``), or none."""

    def __init__(self, directory: str):
        self.directory = directory
        self.fd: int | None = os.open(os.path.join(directory, "owner.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            self.fd = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def remove_leftovers(directory: str) -> None:
    """Remove ``proc-<pid>-*`` working copies of processes that are gone and the claimant's local
    snapshot checkpoints (``db.ckpt-*``) of an upload a crash interrupted (called by the claimant)."""
    for name in os.listdir(directory):
        if name.startswith("db.ckpt-"):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
        if not name.startswith("proc-"):
            continue
        try:
            pid = int(name.split("-")[1])
        except (ValueError, IndexError):
            pid = None
        if pid == os.getpid():
            continue                      # another provider of this process
        if pid is not None:
            try:
                os.kill(pid, 0)
                continue                  # still running
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def private_copy_path(directory: str) -> str:
    return os.path.join(directory, f"proc-{os.getpid()}-{uuid.uuid4().hex[:8]}", "db")


def copy_db(src: str, dst: str, *, link: bool) -> None:
    """Copy a local RocksDB directory; immutable .sst files are hard-linked when ``link``."""
    os.makedirs(dst, mode=0o700, exist_ok=True)
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

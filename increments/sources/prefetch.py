"""Read-ahead of the files the next batch will most likely take, on a background thread.

Contract: a prefetched result is only ever used in place of reading the same file with the same
columns, and only if the file's fingerprint when the read began (`stat`: size and mtime of a
local file; size and etag of an object) equals its fingerprint when the result is used
(`expected`, default `stat`; for an object the file source gives what its listing recorded, so
taking a result costs no request); otherwise, or if the read-ahead failed, the caller reads the file itself (so errors
are raised by the batch that owns the file, naming it, exactly as without read-ahead). It never
changes which files a batch takes (that is the seen-files log's job): it only overlaps decoding
the next file with processing and committing the current batch. At most READ_AHEAD_BATCHES
(file_read_ahead.py) batches ahead are held.

The workers are a ThreadPoolExecutor's: close() (the query's end) and interpreter exit wait for a
decode in progress instead of tearing a thread down inside DuckDB or Arrow (daemon threads were:
a process whose query failed while a read-ahead ran aborted at exit).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as WaitTimeout
from typing import Any, Callable


def _os_stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class ReadAhead:
    """Up to `workers` threads per source reading queued files in order (several files at once: a
    single file's decoder is mostly one thread)."""

    def __init__(self, workers: int = 2, stat: Callable[[str], Any] = _os_stat,
                 expected: Callable[[str], Any] | None = None) -> None:
        #: path -> (columns, the read: (fingerprint when the read began, result))
        self._pending: dict[str, tuple[tuple | None, Future]] = {}
        self._stat = stat
        self._expected = expected or stat
        self._lock = threading.Lock()
        #: results used in place of a read, and results dropped (file changed, read failed, other
        #: columns): what tells a test or a profile that the read-ahead path ran
        self.taken = 0
        self.discarded = 0
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="increments-read-ahead")

    def start(self, paths: list[str], columns: list[str] | None, read: Callable[[str], Any]) -> None:
        """Queue `paths` for reading in the background (dropping read-ahead of any other file)."""
        cols = tuple(columns) if columns is not None else None
        with self._lock:
            for p in list(self._pending):
                if p not in paths:
                    self._pending.pop(p)[1].cancel()
            for p in paths:
                if p not in self._pending:
                    self._pending[p] = (cols, self._pool.submit(self._read, read, p))

    def _read(self, read: Callable[[str], Any], path: str) -> tuple[Any, Any]:
        before = self._stat(path)
        return before, read(path)

    def pending(self) -> set[str]:
        """The paths queued or read ahead and not yet taken."""
        with self._lock:
            return set(self._pending)

    def wait(self, path: str, timeout: float | None = None) -> bool:
        """Block until the read-ahead of `path` has finished (done or failed); False when `path`
        is not queued, was cancelled, or is still running after `timeout` seconds."""
        with self._lock:
            entry = self._pending.get(path)
        if entry is None:
            return False
        try:
            entry[1].exception(timeout)
        except CancelledError:
            return False
        except WaitTimeout:
            return False
        return True

    def take(self, path: str, columns: list[str] | None) -> Any | None:
        """The read-ahead result of `path` with exactly these columns, or None (read it yourself)."""
        with self._lock:
            entry = self._pending.pop(path, None)
        if entry is None:
            return None
        result = self._usable(path, columns, entry)
        with self._lock:
            if result is None:
                self.discarded += 1
            else:
                self.taken += 1
        return result

    def _usable(self, path: str, columns: list[str] | None, entry: tuple) -> Any | None:
        if entry[0] != (tuple(columns) if columns is not None else None):
            return None
        try:
            stat, result = entry[1].result()
        except (Exception, CancelledError):  # noqa: BLE001 - the batch that owns the file reads it and raises
            return None
        if stat is None or self._expected(path) != stat:
            return None
        return result

    def close(self) -> None:
        """Drop what is queued, wait for a read in progress, stop the workers."""
        with self._lock:
            self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)

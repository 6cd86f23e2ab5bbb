"""Read-ahead of the files the next batch will most likely take, on a background thread.

Contract: a prefetched result is only ever used in place of reading the same file with the same
columns, and only if the file's (size, mtime) is the same when the result is used as when the
read began; otherwise, or if the read-ahead failed, the caller reads the file itself (so errors
are raised by the batch that owns the file, naming it, exactly as without read-ahead). It never
changes which files a batch takes (that is the seen-files log's job): it only overlaps decoding
the next file with processing and committing the current batch. At most READ_AHEAD_BATCHES (files.py) batches ahead are held.
"""
from __future__ import annotations

import os
import queue
import threading
from typing import Any, Callable


IDLE_S = 5.0


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class _Pending:
    def __init__(self, path: str, columns: tuple | None, read: Callable[[], Any]):
        self.path, self.columns, self.stat = path, columns, _stat(path)
        self.read = read
        self.result: Any = None
        self.ok = False
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.result = self.read()
            self.ok = True
        except BaseException:  # noqa: BLE001 - the batch that owns the file reads it again and raises
            self.ok = False
        finally:
            self.done.set()


class ReadAhead:
    """Up to `workers` daemon threads per source, started on demand, reading queued files in
    order (several files at once: a single file's decoder is mostly one thread)."""

    def __init__(self, workers: int = 2) -> None:
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Pending] = queue.SimpleQueue()
        self._workers = 0
        self._max_workers = max(1, workers)

    def start(self, paths: list[str], columns: list[str] | None, read: Callable[[str], Any]) -> None:
        """Queue `paths` for reading in the background (dropping read-ahead of any other file)."""
        cols = tuple(columns) if columns is not None else None
        with self._lock:
            for p in list(self._pending):
                if p not in paths:
                    self._pending.pop(p).read = _skipped
            for p in paths:
                if p not in self._pending:
                    self._pending[p] = job = _Pending(p, cols, lambda p=p: read(p))
                    self._queue.put(job)
            while self._workers < min(self._max_workers, self._queue.qsize()):
                self._workers += 1
                threading.Thread(target=self._work, name="increments-read-ahead", daemon=True).start()

    def _work(self) -> None:
        """Run queued reads; exit after IDLE_S without work (start() starts a new worker)."""
        while True:
            try:
                job = self._queue.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._workers -= 1
                        return
                continue
            job.run()

    def take(self, path: str, columns: list[str] | None) -> Any | None:
        """The read-ahead result of `path` with exactly these columns, or None (read it yourself)."""
        with self._lock:
            pending = self._pending.pop(path, None)
        if pending is None or pending.columns != (tuple(columns) if columns is not None else None):
            return None
        pending.done.wait()
        if not pending.ok or pending.stat is None or _stat(path) != pending.stat:
            return None
        return pending.result


def _skipped() -> None:
    raise RuntimeError("read-ahead dropped")

"""glibc's malloc arenas in a process that opens RocksDB working copies run after run (issue 28 item 10).

A Dagster run executed in a long-lived process (in-process execution, a warm Celery worker, a query
restarted per batch) builds a new runtime every run: the partitions' working copies are opened and
closed again, on the state pool's threads, and the pools' threads themselves are new. glibc gives
each thread that allocates concurrently an arena of its own (up to 8 per core), and RocksDB's
allocations of one run (table readers, memtable blocks, iterators) end up spread over all of them;
what they free stays in those arenas as holes that malloc_trim cannot give back. Measured with
bench/runs_memory.py (fanned-out Dagster job in process, RocksDB store, runs 500-1500 of 1,500):
glibc's live bytes +0.4 MB per 1,000 runs either way; with glibc's default arenas its free-but-kept
bytes reached 23.8 MB and its resident heaps grew +2.3 MB; capped at two arenas, 9.6 MB and +0.0 MB
(what still grows, ~9 MB per 1,000 runs, is Python's own small-object arenas: bench/README.md).

So a process caps its arenas at INCREMENTS_MALLOC_ARENA_MAX (default 2), through
mallopt(M_ARENA_MAX), when it imports increments (the state package imports it too, so a process
that opens working copies has imported it first), unless MALLOC_ARENA_MAX is set (glibc read it at the process's start: the operator
chose), INCREMENTS_MALLOC_ARENA_MAX=0 (keep glibc's default), or the C library is not glibc.

Contract: at most once per process; raises only for an INCREMENTS_MALLOC_ARENA_MAX that is not an
integer (a libc that refuses the cap leaves the process with its default, working as before).
Threads that already have an arena keep it, and arenas that exist stay in use (a thread that ends
hands its arena to the next new thread): hence the cap at import, before the process's first batch
starts its thread pools. It costs nothing measurable per batch here (1,500 in-process runs took
407 s capped, 406 s not).
"""
from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8                 # glibc's malloc.h
DEFAULT_ARENAS = 2
_applied: list[int | None] = []


def cap_arenas() -> int | None:
    """Cap glibc's malloc arenas for this process (see the module's doc); the cap applied, or None.
    Idempotent: the first call decides."""
    if _applied:
        return _applied[0]
    _applied.append(_cap())
    return _applied[0]


def _glibc() -> bool:
    """Whether this process's C library is glibc (confstr: no file read, unlike platform.libc_ver)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):
        return False


def _cap() -> int | None:
    if os.environ.get("MALLOC_ARENA_MAX"):
        return None
    raw = os.environ.get("INCREMENTS_MALLOC_ARENA_MAX", "").strip()
    try:
        n = int(raw) if raw else DEFAULT_ARENAS
    except ValueError:
        raise ValueError(f"INCREMENTS_MALLOC_ARENA_MAX={raw!r} is not a number of arenas: give an integer "
                         "(0 leaves glibc's default)") from None
    if n <= 0 or not _glibc():
        return None
    try:
        ok = ctypes.CDLL(None).mallopt(M_ARENA_MAX, n)
    except (OSError, AttributeError):
        return None
    return n if ok == 1 else None

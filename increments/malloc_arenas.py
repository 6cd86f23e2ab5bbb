"""glibc's malloc arenas in a process that opens RocksDB working copies run after run (issue 28 item 10).

A Dagster run executed in a long-lived process (in-process execution, a warm Celery worker, a query
restarted per batch) builds a new runtime every run: the partitions' working copies are opened and
closed again, on the state pool's threads, and the pools' threads themselves are new. glibc gives
each thread that allocates concurrently an arena of its own (up to 8 per core), and RocksDB's
allocations of one run (table readers, memtable blocks, iterators) end up spread over all of them;
what they free stays in those arenas as holes that malloc_trim cannot give back. Measured with
bench/runs_memory.py (fanned-out Dagster job, RocksDB store, 1,500 runs in one process): glibc's live
bytes flat, its free-but-kept bytes +24 MB and the resident memory +38 MB per 1,000 runs with the
default arenas; with two arenas the free-but-kept bytes stay within a few MB and the resident memory
is flat.

So a process caps its arenas at INCREMENTS_MALLOC_ARENA_MAX (default 2), through
mallopt(M_ARENA_MAX), when it imports increments (and, if it did not, when it opens its first working
copy): unless MALLOC_ARENA_MAX is
set (glibc read it at the process's start: the operator chose), INCREMENTS_MALLOC_ARENA_MAX=0 (leave
glibc's default), or the C library is not glibc. Contract: at most once per process; raises only
for an INCREMENTS_MALLOC_ARENA_MAX that is not an integer (a libc that refuses the cap leaves the
process with its default, working as before); threads that already have an
arena keep it, and arenas that exist already stay in use (a thread that ends hands its arena to the
next new thread), which is why the cap comes at import: before the process's first batch starts its
thread pools. The cap costs nothing measurable per batch here (bench/runs_memory.py prints the run
rate beside the memory).
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

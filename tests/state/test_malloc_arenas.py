"""A process that imports increments caps glibc's malloc arenas (increments/malloc_arenas.py).

Each case runs in a new Python process (the cap is per process and must come before the process
has many arenas): it opens a working copy, then starts 8 threads that each allocate, and counts the
heaps glibc reports (malloc_info). Without a cap glibc gives each of those threads an arena of its
own; with the cap they share.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's arenas")

SCRIPT = textwrap.dedent("""
    import ctypes, os, re, sys, tempfile, threading
    sys.path.insert(0, {root!r})
    from increments import malloc_arenas
    from state.working import Working
    w = Working(os.path.join(tempfile.mkdtemp(), "p0", "db"))
    w.write([b"k"], [b"v"], 0, "t", 1, {{}})
    w.close()
    libc = ctypes.CDLL(None)
    barrier = threading.Barrier(8)
    kept = []
    def work():
        barrier.wait()
        kept.append([bytearray(64 << 10) for _ in range(4)])     # malloc'd by this thread
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    path = tempfile.mktemp()
    libc.fopen.restype = ctypes.c_void_p
    fp = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(fp))
    libc.fclose(ctypes.c_void_p(fp))
    heaps = len(re.findall(r'<heap nr="', open(path).read()))
    print("cap", malloc_arenas.cap_arenas(), "heaps", heaps)
""")


def _run(**env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "INCREMENTS_MALLOC_ARENA_MAX")}
    e.update(env)
    return subprocess.run([sys.executable, "-c", SCRIPT.format(root=ROOT)], env=e, capture_output=True,
                          text=True, timeout=120)


def _heaps(out: str) -> tuple[str, int]:
    cap, heaps = out.split()[1], int(out.split()[3])
    return cap, heaps


def test_a_process_opening_working_copies_shares_two_arenas():
    r = _run()
    assert r.returncode == 0, r.stderr
    cap, heaps = _heaps(r.stdout)
    assert cap == "2"
    assert heaps <= 2, r.stdout           # the main arena and at most one more, for 8 threads


def test_zero_leaves_glibc_default():
    r = _run(INCREMENTS_MALLOC_ARENA_MAX="0")
    assert r.returncode == 0, r.stderr
    cap, heaps = _heaps(r.stdout)
    assert cap == "None"
    assert heaps > 2, r.stdout            # the threads got arenas of their own


def test_the_operators_malloc_arena_max_is_left_alone():
    r = _run(MALLOC_ARENA_MAX="4")
    assert r.returncode == 0, r.stderr
    cap, heaps = _heaps(r.stdout)
    assert cap == "None"                  # glibc applied the operator's setting at the start
    assert heaps <= 4, r.stdout


def test_a_bad_value_names_the_variable():
    r = _run(INCREMENTS_MALLOC_ARENA_MAX="two")
    assert r.returncode != 0
    assert "INCREMENTS_MALLOC_ARENA_MAX='two' is not a number of arenas" in r.stderr

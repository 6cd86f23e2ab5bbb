"""Runners that open a new embedded SQLite log at the same moment all get it (WAL mode is set by
one of them; the others wait instead of failing with "database is locked"). The race is narrow:
before the fix this failed in about 1 of 20 two-runner starts; test_concurrent_runners meets it too."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

OPENER = """
import os, sys, time
from increments.checkpoint.log import BatchLog
open(sys.argv[2] + "." + str(os.getpid()), "w").close()          # imported: ready
while not os.path.exists(sys.argv[2]):
    time.sleep(0.001)
BatchLog(sys.argv[1], "q").latest_offsets()
"""


def test_runners_opening_a_new_sqlite_log_at_once_all_succeed(tmp_path):
    script = tmp_path / "opener.py"
    script.write_text(OPENER)
    for attempt in range(8):
        db = tmp_path / f"log{attempt}.sqlite"
        go = tmp_path / f"go{attempt}"
        procs = [subprocess.Popen([sys.executable, str(script), f"sqlite:///{db}", str(go)], stderr=subprocess.PIPE,
                                  text=True) for _ in range(4)]
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob(f"go{attempt}.*"))) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()               # all four open the log at once
        for p in procs:
            assert p.wait(timeout=120) == 0, p.stderr.read()[-1500:]
        with sqlite3.connect(db) as con:
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

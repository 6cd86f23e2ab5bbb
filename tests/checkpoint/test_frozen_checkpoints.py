"""Restarts on checkpoints written by earlier releases (tests/checkpoint/frozen/<release>, each made by
tests/checkpoint/make_frozen.py and never rewritten), as Spark's tests restart on frozen checkpoint
folders of its old versions.

Each folder is a local checkpoint (SQLite offsets/commits log, RocksDB state with changelog
checkpointing, a file source's seen-files entries) with its input files and its Delta sink, after
three files = batches 0-2 and the no-data batch 3 that the watermark's advance ran. The test adds one
input file, restarts the same query (make_frozen.start) and checks the exact result.

Where the folder goes: the checkpoint records absolute paths (its plan in chk/conf.json names the
source directory and the sink table, and a restart naming other paths is refused as a different
query; chk/log.json names the SQLite log file). So the test does not relocate it: it copies the
folder to make_frozen.PLACE/<release>, the place it was written at and its paths point to, under a
lock (two test runs on one machine take turns), and removes it afterwards. The RocksDB working
copies start from an empty local directory: the state comes from the checkpoint's changelog files,
as on a fresh machine.
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
from datetime import datetime, timezone

import pytest

import increments as inc

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("make_frozen", os.path.join(HERE, "make_frozen.py"))
make_frozen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_frozen)

RELEASES = sorted(os.listdir(make_frozen.FROZEN))


def _t(hm: str) -> datetime:
    h, m = hm.split(":")
    return datetime(2026, 1, 1, int(h), int(m), tzinfo=timezone.utc)


def _window(start: str, end: str) -> dict:
    return {"start": _t(start), "end": _t(end)}


#: what the frozen batches 0-3 wrote (make_frozen's docstring walks through them)
FROZEN_OUTPUT = [
    {"window": _window("00:00", "00:10"), "count": 3},
    {"window": _window("00:10", "00:20"), "count": 2},
    {"window": _window("00:20", "00:30"), "count": 2},
]
#: what the restart adds: the window whose first row is in the frozen state, its second in the new file
RESTART_OUTPUT = [{"window": _window("00:40", "00:50"), "count": 2}]


@contextlib.contextmanager
def _placed(release: str):
    """The frozen folder copied to the place its recorded paths point to; yields that path."""
    os.makedirs(make_frozen.PLACE, exist_ok=True)
    with open(os.path.join(make_frozen.PLACE, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder = os.path.join(make_frozen.PLACE, release)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(os.path.join(make_frozen.FROZEN, release), folder)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _rows(folder: str) -> list[dict]:
    return sorted(inc.read.delta(os.path.join(folder, "out")).load().to_pylist(), key=lambda r: r["window"]["start"])


def test_there_is_a_frozen_checkpoint():
    assert RELEASES, f"no frozen checkpoint under {make_frozen.FROZEN}"


@pytest.mark.parametrize("release", RELEASES)
def test_a_restart_on_a_frozen_checkpoint_continues_at_the_next_batch_with_its_state(release, tmp_path):
    with _placed(release) as folder:
        assert _rows(folder) == FROZEN_OUTPUT                       # the folder is what make_frozen wrote
        make_frozen.write_input(os.path.join(folder, "in", make_frozen.NEXT_FILE[0]), make_frozen.NEXT_FILE[1])
        q = make_frozen.start(folder, str(tmp_path / "local"))
        q.await_termination()
        assert q.exception() is None
        progress = [(p["batch_id"], p["num_input_rows"]) for p in q.recent_progress]
        # batch 4 reads only the new file (the seen-files entries of 0-2 hold); batch 5 is the
        # no-data batch the watermark's advance to 00:53 runs, which emits [00:40, 00:50)
        assert progress[0] == (4, 2), progress
        assert [b for b, _ in progress] == list(range(4, 4 + len(progress))) and sum(n for _, n in progress) == 2
        assert _rows(folder) == FROZEN_OUTPUT + RESTART_OUTPUT
        # the restart ran under the frozen query's id: the log and the checkpoint's identity carried over
        assert q.name == "frozen_windowed_count"

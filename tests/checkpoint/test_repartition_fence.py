"""Issue 28 item 3: `increments repartition` while a runner is active. The command takes the
query's ownership in the log as a runner does (a fence entry at the next batch id): a runner idle
between batches stops at its next plan with an error naming the command and the new count, and a
runner frozen (SIGSTOP) inside a batch makes the command refuse. Real runner processes, the real
CLI, RocksDB state; the counts after the restart equal the rows fed (no batch on the old
partitioning after the command)."""
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.dirname(HERE)])}


def _feed(inp: str, start: int, n: int, rows: int = 50) -> None:
    os.makedirs(inp, exist_ok=True)
    for f in range(start, start + n):
        tmp = os.path.join(inp, f"_f-{f:03d}.json")
        with open(tmp, "w") as fh:
            fh.write("".join(json.dumps({"id": f * rows + i}) + "\n" for i in range(rows)))
        os.rename(tmp, os.path.join(inp, f"f-{f:03d}.json"))


def _runner(d, partitions: int, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.path.join(HERE, "repartition_query.py"), d["in"], d["chk"], d["out"],
                             str(partitions), *map(str, extra)], env=ENV, stderr=subprocess.PIPE, text=True)


def _batches(d) -> list[int]:
    return sorted(int(os.path.basename(p)[:-5]) for p in glob.glob(os.path.join(d["out"], "*.json")))


def _wait(cond, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _repartition(d, n: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "increments.cli", "repartition", d["chk"], "--partitions", str(n)],
                          env=ENV, capture_output=True, text=True, timeout=300)


def _total(d) -> int:
    last = max(_batches(d))
    with open(os.path.join(d["out"], f"{last}.json")) as f:
        return sum(r["count"] for r in json.load(f))


@pytest.fixture
def d(tmp_path):
    return {k: str(tmp_path / k) for k in ("in", "chk", "out")}


def test_a_running_runner_loses_the_query_to_repartition_and_stops(d):
    _feed(d["in"], 0, 3)
    runner = _runner(d, 2)
    try:
        _wait(lambda: len(_batches(d)) >= 3, "the runner's first three batches")
        r = _repartition(d, 3)                    # the runner is idle between batches (no new file)
        assert r.returncode == 0, r.stderr
        assert "state partitions 2 -> 3" in r.stdout
        _feed(d["in"], 3, 2)                      # its next plan meets the fence entry
        assert runner.wait(timeout=180) == 1
    finally:
        if runner.poll() is None:
            runner.kill()
    err = runner.stderr.read()
    assert "increments repartition took over the query's checkpoint at batch 3" in err
    assert "lost the query's ownership" in err and 'option("state_partitions", 3)' in err
    assert _batches(d) == [0, 1, 2]               # nothing written on the old partitioning
    # a restart with the old count is refused; with the new one it takes over batch 3
    with open(os.path.join(d["out"], "stop"), "w"):
        pass
    old = _runner(d, 2)
    assert old.wait(timeout=180) == 1
    assert "state_partitions" in old.stderr.read()
    os.remove(os.path.join(d["out"], "stop"))
    new = _runner(d, 3)
    try:
        _wait(lambda: len(_batches(d)) >= 5, "batches 3 and 4 after the restart")
    finally:
        with open(os.path.join(d["out"], "stop"), "w"):
            pass
        assert new.wait(timeout=180) == 0, new.stderr.read()
    assert _batches(d) == [0, 1, 2, 3, 4]
    assert _total(d) == 250                       # every row counted once, on 3 partitions


def test_repartition_refuses_while_a_runner_is_inside_a_batch(d):
    _feed(d["in"], 0, 2)
    runner = _runner(d, 2, 1)                      # freezes itself right after planning batch 1
    try:
        _wait(lambda: open(f"/proc/{runner.pid}/stat").read().split()[2] == "T", "the frozen runner")
        r = _repartition(d, 3)
        assert r.returncode != 0
        assert "batch 1" in r.stderr and "planned but not committed" in r.stderr and "runner" in r.stderr
        runner.send_signal(signal.SIGCONT)          # it goes on, unharmed
        _wait(lambda: _batches(d) == [0, 1], "batch 1 after SIGCONT")
        with open(os.path.join(d["out"], "stop"), "w"):
            pass
        assert runner.wait(timeout=180) == 0, runner.stderr.read()
    finally:
        if runner.poll() is None:
            runner.kill()
    assert _total(d) == 100
    r = _repartition(d, 3)                          # stopped now: done
    assert r.returncode == 0, r.stderr

"""SIGKILL between protocol steps, then restart: every row exactly once, on SQLite and PostgreSQL.

The query runs in a real subprocess; a listener kills it (SIGKILL) right after a step of a
batch. A restart redoes the uncommitted batch with the same offsets (offsets[N] without
commits[N]) and the idempotent sinks leave each row once.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

import increments as inc
from increments.checkpoint.log import BatchLog
from increments.checkpoint.metadata import read_json

SCRIPT = os.path.join(os.path.dirname(__file__), "crash_query.py")


def _write_inputs(d, files=4, rows=5):
    os.makedirs(d, exist_ok=True)
    expected = []
    for f in range(files):
        with open(os.path.join(d, f"part-{f:03d}.json"), "w") as fh:
            for r in range(rows):
                i = f * 100 + r
                amount = -1.0 if r == 4 else i / 10
                fh.write(json.dumps({"id": i, "name": f"n{i}", "amount": amount}) + "\n")
                if amount >= 0:
                    expected.append((i, f"n{i}", round(amount * 100)))
    return sorted(expected)


def _run(args, expect_kill=False):
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300)
    if expect_kill:
        assert p.returncode == -9, f"expected SIGKILL, got {p.returncode}: {p.stderr[-2000:]}"
    else:
        assert p.returncode == 0, p.stderr[-3000:]


def _output_rows(kind, path):
    if kind == "parquet":
        t = inc.read.parquet_sink(path)
        return sorted(zip(*(t.column(c).to_pylist() for c in ("id", "name", "amount_cents"))))
    rows = []
    for f in sorted(glob.glob(os.path.join(path, "*.jsonl"))):
        for line in open(f):
            r = json.loads(line)
            rows.append((r["id"], r["name"], r["amount_cents"]))
    return sorted(rows)


@pytest.mark.faults
@pytest.mark.parametrize("sink_kind", ["parquet", "foreach_batch"])
@pytest.mark.parametrize("crash_step", ["plan", "read", "process", "write", "commit"])
def test_sigkill_after_step_then_restart_is_exactly_once(tmp_path, log_url, sink_kind, crash_step):
    if log_url.startswith("postgres") and sink_kind == "foreach_batch" and crash_step in ("read", "process"):
        pytest.skip("covered on SQLite; keeps the PostgreSQL matrix to the issue's two crash points plus commit")
    expected = _write_inputs(str(tmp_path / "in"))
    chk, out = str(tmp_path / "chk"), str(tmp_path / "out")
    args = [str(tmp_path / "in"), chk, sink_kind, out, log_url]
    _run(args + ["2", crash_step], expect_kill=True)
    meta = read_json(os.path.join(chk, "metadata.json"))
    log = BatchLog(log_url, meta["id"])
    last_offsets, last_commit = log.latest_offsets(), log.latest_commit()
    assert last_offsets.batch_id == 2
    assert (last_commit.batch_id if last_commit else None) == (2 if crash_step == "commit" else 1)
    _run(args)
    assert _output_rows(sink_kind, out) == expected
    # the redo used exactly the offsets written before the crash
    assert log.get_offsets(2).end == last_offsets.end
    assert log.latest_commit().batch_id == 3
    if crash_step != "commit":
        assert log.get_offsets(2).attempt == 2  # redone by the restarted runner

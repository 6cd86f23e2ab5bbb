"""Two runners of one query at once: exactly one commits each batch, the other stops with a clear
error (ConcurrentRunError, never a RocksDB lock or a missing file), and the output holds every row
once. The stateful variants run a RocksDB query, the runners with one TMPDIR each (two machines)
or sharing one (two processes on one machine: one local cache directory)."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time

import pytest

from increments.checkpoint.log import BatchLog
from increments.checkpoint.metadata import read_json

SCRIPT = os.path.join(os.path.dirname(__file__), "concurrent_query.py")


def _env(tmp_path, i):
    tmp = tmp_path / f"machine{i}"
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmp))
    env.pop("INCREMENTS_LOCAL_DIR", None)
    return env


@pytest.mark.faults
@pytest.mark.parametrize("kind", ["stateless", "stateful", "stateful_one_machine"])
def test_two_runners_one_commits_each_batch(tmp_path, log_url, kind):
    d = tmp_path / "in"
    d.mkdir()
    for f in range(6):
        (d / f"f{f}.json").write_text("".join(json.dumps({"id": f * 10 + i}) + "\n" for i in range(3)))
    chk, out = str(tmp_path / "chk"), str(tmp_path / "out")
    args = [sys.executable, SCRIPT, str(d), chk, out, log_url] + (["stateful"] if kind != "stateless" else [])
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env(tmp_path, 0 if kind == "stateful_one_machine" else i)) for i in range(2)]
    deadline = time.monotonic() + 120   # both imported: start them together (see concurrent_query.py)
    while len(glob.glob(os.path.join(out, "ready.*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    open(os.path.join(out, "go"), "w").close()
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 1], results
    loser_err = next(err for code, err in results if code != 0)
    assert "ConcurrentRunError" in loser_err or "another runner" in loser_err
    assert "Start only one runner per checkpoint" in loser_err
    meta = read_json(os.path.join(chk, "metadata.json"))
    log = BatchLog(log_url, meta["id"])
    hist = log.history()
    assert [o.batch_id for o, c in hist if c is not None] == list(range(6))
    ids = [f * 10 + i for f in range(6) for i in range(3)]
    if kind != "stateless":
        last = json.load(open(os.path.join(out, "5.json")))
        assert sorted((r["g"], r["count"]) for r in last) == sorted(
            (g, sum(1 for i in ids if i % 3 == g)) for g in range(3))
        return
    rows = sorted(i for f in glob.glob(os.path.join(out, "*.json")) for i in json.load(open(f)))
    assert rows == sorted(ids)

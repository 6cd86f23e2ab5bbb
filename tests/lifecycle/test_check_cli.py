"""`increments check module:function` run as a user runs it (a subprocess), on a real checkpoint
made by running the query: exit 0 when a restart is safe, 1 naming the change and Spark's rule;
nothing in the checkpoint or the log is written."""
from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import subprocess
import sys

import pytest

BIN = os.path.join(os.path.dirname(sys.executable), "increments")
HERE = os.path.dirname(__file__)


def _write_input(d: str, files: int = 2) -> None:
    os.makedirs(d, exist_ok=True)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for f in range(files):
        with open(os.path.join(d, f"clicks-{f:03d}.json"), "w") as fh:
            for i in range(10):
                t = (t0 + dt.timedelta(minutes=f * 10 + i)).isoformat().replace("+00:00", "Z")
                fh.write(json.dumps({"campaign_id": f"c{i % 3}", "user_id": f"u{i % 4}", "event_time": t,
                                     "ts2": t}) + "\n")


def _snapshot(chk: str) -> dict[str, tuple[int, float]]:
    out = {}
    for root, _, files in os.walk(chk):
        for f in files:
            p = os.path.join(root, f)
            st = os.stat(p)
            out[p] = (st.st_size, st.st_mtime_ns)
    return out


def _log_rows(chk: str) -> dict[str, int]:
    db = sqlite3.connect(os.path.join(chk, "log.sqlite"))
    try:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        return {t: db.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables}
    finally:
        db.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("check")
    e = dict(os.environ, CHECK_IN=str(tmp / "in"), CHECK_IN2=str(tmp / "in2"), CHECK_CHK=str(tmp / "chk"),
             CHECK_OUT=str(tmp / "out"), PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    _write_input(e["CHECK_IN"])
    _write_input(e["CHECK_IN2"], files=1)
    run = ("import check_queries as q; q.original().start().await_termination()")
    r = subprocess.run([sys.executable, "-c", run], env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert os.path.exists(os.path.join(e["CHECK_CHK"], "conf.json"))
    return e


def _check(env, fn: str, *extra: str) -> subprocess.CompletedProcess:
    before, rows = _snapshot(env["CHECK_CHK"]), _log_rows(env["CHECK_CHK"])
    r = subprocess.run([BIN, "check", f"check_queries:{fn}", *extra], env=env, capture_output=True, text=True,
                       timeout=300)
    assert _snapshot(env["CHECK_CHK"]) == before, "check wrote into the checkpoint"
    assert _log_rows(env["CHECK_CHK"]) == rows, "check wrote log rows"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r


@pytest.mark.parametrize("fn", ["original", "filter_after", "filter_before"])
def test_allowed_changes_exit_0(env, fn):
    r = _check(env, fn)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "restart is SAFE" in r.stdout
    assert "projections and filters are allowed" in r.stdout


@pytest.mark.parametrize("fn,change,rule", [
    ("changed_key", "grouping key changed", "grouping keys of a stateful operation are not allowed"),
    ("changed_aggregate", "aggregate changed", "aggregates of a stateful operation are not allowed"),
    ("changed_aggregate_same_schema", "aggregate changed: count(*) AS count -> count(user_id) AS count",
     "even when their schema stays the same"),
    ("changed_watermark_column", "watermark column changed: ['event_time'] -> ['ts2']",
     "event-time column of with_watermark cannot change"),
    ("more_partitions", "number of state partitions changed: 2 -> 3", "increments repartition"),
    ("new_source", "new source 1 added", "number or type (or topic, path) of input sources are not allowed"),
    ("projection_drops_column", "output schema changed: column 'count' (int64) is in the table but not in the "
     "query's output", "sink accepts the new output schema"),
])
def test_unsafe_changes_exit_1_naming_change_and_rule(env, fn, change, rule):
    r = _check(env, fn)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "restart is NOT SAFE" in r.stdout
    assert change in r.stdout and rule in r.stdout, r.stdout


def test_check_agrees_with_a_real_start(env):
    """What check calls unsafe, a start refuses; what it calls safe, a start runs."""
    code = ("import sys, increments as inc, check_queries as q\n"
            "try:\n    getattr(q, sys.argv[1])().start().await_termination()\n"
            "except inc.IncompatibleCheckpointError:\n    sys.exit(3)\n")
    r = subprocess.run([sys.executable, "-c", code, "changed_key"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 3, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-c", code, "filter_after"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_other_checkpoint_and_bad_target(env, tmp_path):
    r = _check(env, "changed_key", "--checkpoint", str(tmp_path / "fresh"))
    assert r.returncode == 0 and "first start" in r.stdout
    assert not os.path.exists(tmp_path / "fresh" / "metadata.json")
    r = subprocess.run([BIN, "check", "check_queries:not_a_writer"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and "not a write_stream writer" in r.stderr

"""`increments migrate`: a changed aggregation moved to a new checkpoint with a backfill while new data
keeps arriving; after the switch-over the sink table equals the changed query run from scratch
over all the data, and readers saw the old result, then the new one (one overwrite commit)."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading

import pytest

HERE = os.path.dirname(__file__)
BIN = os.path.join(os.path.dirname(sys.executable), "increments")
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _file(d: str, f: int) -> None:
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".tmp-{f}")
    with open(tmp, "w") as fh:
        for i in range(8):
            t = (T0 + dt.timedelta(minutes=f * 8 + i)).isoformat().replace("+00:00", "Z")
            fh.write(json.dumps({"campaign_id": f"c{i % 3}", "amount": f * 10 + i, "event_time": t}) + "\n")
    os.replace(tmp, os.path.join(d, f"part-{f:04d}.json"))      # a file is complete when it lands


def _rows(path: str) -> list[tuple]:
    from increments.sinks.delta import read_table
    t = read_table(path)[0]
    cols = [c for c in ("window", "campaign_id", "count", "revenue") if c in t.column_names]
    return sorted(tuple(json.dumps(r[c], default=str) for c in cols) for r in t.select(cols).to_pylist())


def _env(tmp_path, chk: str, out: str) -> dict:
    return dict(os.environ, MIG_IN=str(tmp_path / "in"), MIG_CHK=str(tmp_path / chk), MIG_OUT=str(tmp_path / out),
                PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run(env: dict, fn: str) -> None:
    r = subprocess.run([sys.executable, "-c", f"import migrate_queries as q; q.{fn}().start().await_termination()"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def _scratch(tmp_path) -> list[tuple]:
    env = _env(tmp_path, "chk_scratch", "scratch")
    _run(env, "changed")
    return _rows(env["MIG_OUT"])


def _old_query_ran(tmp_path, monkeypatch, files: int) -> dict:
    """`files` input files, the original query run over them on chk_old, and the MIG_* environment
    set in this process (as migrate runs the changed query here); returns that environment."""
    inp = str(tmp_path / "in")
    for f in range(files):
        _file(inp, f)
    old = _env(tmp_path, "chk_old", "out")
    _run(old, "original")
    for k, v in old.items():
        if k.startswith("MIG_"):
            monkeypatch.setenv(k, v)
    sys.path.insert(0, HERE)
    return old


def test_migrate_api_follows_the_old_query_until_caught_up(tmp_path, monkeypatch):
    """In process: the old query (not yet stopped) commits more batches while drain 0 runs
    (deterministically: the on_round hook runs it), so drain 0 is behind its committed offsets and a
    second drain follows; the switch comes once the new query's offsets reach the old query's."""
    from deltalake import DeltaTable
    inp = str(tmp_path / "in")
    old = _old_query_ran(tmp_path, monkeypatch, 3)
    assert "revenue" not in DeltaTable(old["MIG_OUT"]).schema().to_arrow().names
    import migrate_queries
    from increments.lifecycle.migrate import migrate
    seen = {}

    def old_goes_on(r: dict) -> None:
        if r["round"] == 0:
            for f in (3, 4):
                _file(inp, f)
            _run(old, "original")               # the old query's offsets move past what drain 0 read
            seen["before"] = DeltaTable(old["MIG_OUT"]).version()

    def more(_round: int) -> None:
        _file(inp, 5)                           # after the old query's last batch: read by the new query
    lines: list[str] = []
    res = migrate(migrate_queries.changed(), str(tmp_path / "chk_new"), on_round=old_goes_on, between_rounds=more,
                  report=lines.append)
    assert [r["caught_up"] for r in res.rounds] == [False, True], lines
    assert any("behind the old query" in x for x in lines) and any("caught up" in x for x in lines)
    assert sum(r["input_rows"] for r in res.rounds) == 6 * 8
    t = DeltaTable(old["MIG_OUT"])
    assert res.sink_version == seen["before"] + 1 == t.version()   # the switch is one commit
    assert t.history(1)[0]["operation"] in ("WRITE", "CREATE OR REPLACE TABLE")
    assert "revenue" in t.schema().to_arrow().names
    assert t.transaction_version(res.query_id) == res.last_batch_id
    assert not os.path.exists(res.staging_table)                   # the staging table is removed
    r = subprocess.run([sys.executable, "-c", "import migrate_queries as q; q.original().start().await_termination()"],
                       env=old, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "retired" in r.stderr and str(tmp_path / "chk_new") in r.stderr, r.stderr[-2000:]
    assert DeltaTable(old["MIG_OUT"]).version() == res.sink_version  # the old query wrote nothing
    _file(inp, 9)                                                   # after the switch: the changed query goes on
    _run(_env(tmp_path, "chk_new", "out"), "changed")
    assert _rows(old["MIG_OUT"]) == _scratch(tmp_path)


def test_migrate_not_caught_up_switches_nothing(tmp_path, monkeypatch):
    from deltalake import DeltaTable

    from increments.errors import AnalysisException
    inp = str(tmp_path / "in")
    old = _old_query_ran(tmp_path, monkeypatch, 2)
    import migrate_queries
    from increments.lifecycle.migrate import migrate

    def old_goes_on(r: dict) -> None:
        _file(inp, 2 + r["round"])
        _run(old, "original")
    with pytest.raises(AnalysisException, match="has not caught up"):
        migrate(migrate_queries.changed(), str(tmp_path / "chk_new"), max_rounds=2, on_round=old_goes_on,
                report=lambda s: None)
    t = DeltaTable(old["MIG_OUT"])
    assert "revenue" not in t.schema().to_arrow().names       # not switched: the old query's result stays
    assert not os.path.exists(str(tmp_path / "chk_old" / "retired.json"))


def test_migrate_cli_while_files_keep_landing(tmp_path):
    inp = str(tmp_path / "in")
    for f in range(3):
        _file(inp, f)
    old = _env(tmp_path, "chk_old", "out")
    _run(old, "original")
    chk = subprocess.run([BIN, "check", "migrate_queries:changed"], env=old, capture_output=True, text=True,
                         timeout=300)
    assert chk.returncode == 1 and "aggregate changed" in chk.stdout, chk.stdout + chk.stderr
    stop = threading.Event()

    def land() -> None:                 # new data keeps arriving while migrate runs
        for f in range(3, 12):
            if stop.is_set():
                return
            _file(inp, f)
            stop.wait(0.2)
    writer = threading.Thread(target=land)
    writer.start()
    try:
        r = subprocess.run([BIN, "migrate", "migrate_queries:changed", "--to", str(tmp_path / "chk_new"),
                            "--backfill", "earliest"], env=old, capture_output=True, text=True, timeout=600)
    finally:
        writer.join()
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "switched over" in r.stdout and "drain 0" in r.stdout
    assert not os.path.exists(str(tmp_path / "out") + "__migrate")
    assert os.path.exists(str(tmp_path / "chk_old" / "retired.json"))
    new = _env(tmp_path, "chk_new", "out")
    again = subprocess.run([BIN, "check", "migrate_queries:changed"], env=new, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stdout       # the changed query on its new checkpoint: safe
    _run(new, "changed")                             # whatever landed after the switch
    assert _rows(new["MIG_OUT"]) == _scratch(tmp_path)


def test_migrate_refuses_the_current_checkpoint_and_from_sink_without_an_old_query(tmp_path):
    _file(str(tmp_path / "in"), 0)
    env = _env(tmp_path, "chk_old", "out")
    r = subprocess.run([BIN, "migrate", "migrate_queries:changed", "--to", env["MIG_CHK"]], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "current checkpoint" in r.stderr
    r = subprocess.run([BIN, "migrate", "migrate_queries:changed", "--to", str(tmp_path / "n"),
                        "--backfill-from-sink"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "has no metadata.json" in r.stderr and "--backfill earliest" in r.stderr, r.stderr
    assert not os.path.exists(str(tmp_path / "n"))          # refused before anything ran


def test_a_rerun_of_a_finished_migrate_says_it_is_done(tmp_path):
    """Issue 28 item 9: the same command again after the switch names the finished migration
    (not "a different query or configuration"), removes a staging table a crash after the switch
    left, and touches nothing else."""
    from deltalake import DeltaTable, write_deltalake
    inp = str(tmp_path / "in")
    for f in range(2):
        _file(inp, f)
    old = _env(tmp_path, "chk_old", "out")
    _run(old, "original")
    cmd = [BIN, "migrate", "migrate_queries:changed", "--to", str(tmp_path / "chk_new"), "--backfill", "earliest"]
    r = subprocess.run(cmd, env=old, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    version = DeltaTable(old["MIG_OUT"]).version()
    staging = old["MIG_OUT"] + "__migrate"
    write_deltalake(staging, DeltaTable(old["MIG_OUT"]).to_pyarrow_table())   # as left by a crash after the switch
    again = subprocess.run(cmd, env=old, capture_output=True, text=True, timeout=600)
    assert again.returncode == 1
    assert "this migration is done" in again.stderr and str(tmp_path / "chk_new") in again.stderr
    assert "different query or configuration" not in again.stderr
    assert "leftover staging table" in again.stderr and not os.path.exists(staging)
    assert DeltaTable(old["MIG_OUT"]).version() == version
    other = subprocess.run(cmd[:4] + [str(tmp_path / "chk_other")], env=old, capture_output=True, text=True,
                           timeout=600)
    assert other.returncode == 1 and "already migrated to" in other.stderr
    assert not os.path.exists(str(tmp_path / "chk_other"))

"""`increments migrate --backfill-from-sink` (increments/lifecycle/from_sink.py): a bronze query whose
source lost its early input is migrated with its old Delta table standing in for that input, while
new data keeps arriving; the final table equals the changed query over all the data (computed here,
without the engine); the unsound cases are refused and nothing is switched."""
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


def _records(f: int) -> list[dict]:
    return [{"campaign_id": f"c{i % 3}", "amount": f * 10 + i,
             "event_time": (T0 + dt.timedelta(minutes=f * 8 + i)).isoformat().replace("+00:00", "Z")}
            for i in range(8)]


def _file(d: str, f: int) -> None:
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".tmp-{f}")
    with open(tmp, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in _records(f))
    os.replace(tmp, os.path.join(d, f"part-{f:04d}.json"))      # a file is complete when it lands


def _expected(files: range | list[int]) -> list[tuple]:
    """What queries.changed produces from scratch over these input files (plain Python)."""
    return sorted((r["campaign_id"], r["amount"], r["amount"] * 10) for f in files for r in _records(f)
                  if r["amount"] % 2 == 0)


def _rows(path: str, cols=("campaign_id", "amount", "amount_x10")) -> list[tuple]:
    from increments.sinks.delta import read_table
    t = read_table(path)[0]
    return sorted(tuple(r[c] for c in cols) for r in t.select(list(cols)).to_pylist())


def _env(tmp_path, chk: str) -> dict:
    return dict(os.environ, FS_IN=str(tmp_path / "in"), FS_CHK=str(tmp_path / chk), FS_OUT=str(tmp_path / "out"),
                PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run(env: dict, fn: str) -> None:
    r = subprocess.run([sys.executable, "-c", f"import from_sink_queries as q; q.{fn}().start().await_termination()"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def _old_ran(tmp_path, monkeypatch, files: int, old: str = "bronze", gone: int = 3, log: str | None = None,
             **where: str) -> dict:
    """`files` input files, the old query run over them on chk_old, then the first `gone` files
    removed from the source directory (their rows now only in the old table); the FS_* environment
    set in this process (migrate runs the changed query here)."""
    inp = str(tmp_path / "in")
    for f in range(files):
        _file(inp, f)
    env = dict(_env(tmp_path, "chk_old"), **where)
    if log:
        env["FS_LOG"] = log
    _run(env, old)
    for f in range(gone):
        os.remove(os.path.join(inp, f"part-{f:04d}.json"))
    for k, v in env.items():
        if k.startswith("FS_"):
            monkeypatch.setenv(k, v)
    sys.path.insert(0, HERE)
    return env


def _migrate(tmp_path, fn: str = "changed", to: str | None = None, **kw):
    import from_sink_queries
    from increments.lifecycle.migrate import migrate
    lines: list[str] = []
    kw.setdefault("report", lines.append)
    res = migrate(getattr(from_sink_queries, fn)(), to or str(tmp_path / "chk_new"), backfill="from-sink", **kw)
    return res, lines


def test_from_sink_backfills_what_the_source_lost_and_continues_at_the_old_offsets(tmp_path, monkeypatch, log_url):
    """Files 0-2 are gone from the source; the old query (still running) reads files 6-7 while the
    backfill from its table runs, file 8 lands after its last batch. The source drains start after
    the old query's files (no file read twice), follow it, and the switch is one commit; afterwards
    the changed query goes on from the new checkpoint. SQLite and PostgreSQL logs."""
    from deltalake import DeltaTable
    inp = str(tmp_path / "in")
    old = _old_ran(tmp_path, monkeypatch, 6, log=log_url)
    assert not os.path.exists(os.path.join(inp, "part-0000.json"))
    seen = {}

    def old_goes_on(r: dict) -> None:
        if r["phase"] == "sink":
            for f in (6, 7):
                _file(inp, f)
            _run(old, "bronze")                 # the old query's offsets move past what the backfill read
            _file(inp, 8)                       # after the old query's last batch: the new query's to read
            seen["before"] = DeltaTable(old["FS_OUT"]).version()
    res, lines = _migrate(tmp_path, on_round=old_goes_on)
    assert [(r["phase"], r["caught_up"]) for r in res.rounds] == [("sink", False), ("source", True)], lines
    assert res.rounds[0]["batches"] == 6 and res.rounds[0]["input_rows"] == 6 * 8     # old batches 0-5, from the table
    assert res.rounds[1]["input_rows"] == 3 * 8                                      # files 6, 7, 8 from the source
    assert any(x.startswith("rows check: ") for x in lines), lines
    t = DeltaTable(old["FS_OUT"])
    assert res.sink_version == seen["before"] + 1 == t.version()      # the switch is one commit
    assert t.transaction_version(res.query_id) == res.last_batch_id
    assert not os.path.exists(res.staging_table)
    assert _rows(old["FS_OUT"]) == _expected(range(9))               # files 0-2 came from the old table
    # the new checkpoint's file source starts after the old query's files: file 9 only, nothing again
    _file(inp, 9)
    _run(dict(old, FS_CHK=str(tmp_path / "chk_new")), "changed")
    assert _rows(old["FS_OUT"]) == _expected(range(10))
    r = subprocess.run([sys.executable, "-c", "import from_sink_queries as q; q.bronze().start().await_termination()"],
                       env=old, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "retired" in r.stderr, r.stderr[-2000:]


def test_from_sink_cli_while_files_keep_landing(tmp_path, monkeypatch):
    inp = str(tmp_path / "in")
    old = _old_ran(tmp_path, monkeypatch, 5, gone=2)
    stop = threading.Event()
    landed: list[int] = []

    def land() -> None:                 # new data keeps arriving while migrate runs
        for f in range(5, 12):
            if stop.is_set():
                return
            _file(inp, f)
            landed.append(f)
            stop.wait(0.2)
    writer = threading.Thread(target=land)
    writer.start()
    try:
        r = subprocess.run([BIN, "migrate", "from_sink_queries:changed", "--to", str(tmp_path / "chk_new"),
                            "--backfill-from-sink"], env=old, capture_output=True, text=True, timeout=600)
    finally:
        stop.set()
        writer.join()
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "backfill from the old table" in r.stdout and "rows check" in r.stdout and "switched over" in r.stdout
    new = _env(tmp_path, "chk_new")
    again = subprocess.run([BIN, "check", "from_sink_queries:changed"], env=new, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stdout       # the changed query on its new checkpoint: safe
    _run(new, "changed")                             # whatever landed after the switch
    assert _rows(new["FS_OUT"]) == _expected(range(5 + len(landed)))


@pytest.mark.parametrize("old, changed, words", [
    ("filtered", "changed", "filtered rows out"),
    ("transformed", "changed", "transformed them"),
    ("bronze", "wider", "'channel' (read by the changed query from its source) is not in the table"),
])
def test_from_sink_refuses_a_table_that_is_not_the_sources_rows(tmp_path, monkeypatch, old, changed, words):
    from deltalake import DeltaTable

    from increments.errors import AnalysisException
    env = _old_ran(tmp_path, monkeypatch, 4, old=old, gone=1)
    before = DeltaTable(env["FS_OUT"]).version()
    with pytest.raises(AnalysisException) as e:
        _migrate(tmp_path, changed)
    msg = str(e.value)
    assert words in msg and "--backfill earliest" in msg and "'bronze'" in msg and str(tmp_path / "out") in msg, msg
    assert DeltaTable(env["FS_OUT"]).version() == before          # nothing switched
    assert not os.path.exists(tmp_path / "chk_new" / "metadata.json")   # nothing ran on the new checkpoint
    assert not os.path.exists(tmp_path / "chk_old" / "retired.json")


def test_from_sink_refuses_a_rewritten_table_and_a_stateful_old_query(tmp_path, monkeypatch):
    from deltalake import DeltaTable

    from increments.errors import AnalysisException
    env = _old_ran(tmp_path, monkeypatch, 4, gone=1)
    DeltaTable(env["FS_OUT"]).delete("amount = 13")        # someone deleted rows from the old table
    with pytest.raises(AnalysisException, match=r"version 4 removed or rewrote .* not an append log"):
        _migrate(tmp_path)
    # a stateful old query (a windowed aggregation, tests/lifecycle/migrate_queries.py): its table holds results
    import migrate_queries
    from increments.lifecycle.migrate import migrate
    mig = dict(MIG_IN=env["FS_IN"], MIG_CHK=str(tmp_path / "agg_chk"), MIG_OUT=str(tmp_path / "agg_out"))
    for k, v in mig.items():
        monkeypatch.setenv(k, v)
    migrate_queries.original().start().await_termination()
    with pytest.raises(AnalysisException, match=r"old query is stateful .*StateStoreSaveExec|old query is stateful"):
        migrate(migrate_queries.changed(), str(tmp_path / "agg_new"), backfill="from-sink", report=lambda s: None)


def test_from_sink_without_retained_input_needs_no_sink_check(tmp_path, monkeypatch):
    """Every input file is gone: the rows check cannot run, so migrate refuses (exit 1) unless told
    --no-sink-check; then the table alone is the history, and new files continue it."""
    inp = str(tmp_path / "in")
    env = _old_ran(tmp_path, monkeypatch, 3, gone=3)
    r = subprocess.run([BIN, "migrate", "from_sink_queries:changed", "--to", str(tmp_path / "chk_new"),
                        "--backfill-from-sink"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "--no-sink-check" in r.stderr and "--backfill earliest" in r.stderr, r.stderr
    _file(inp, 3)
    r = subprocess.run([BIN, "migrate", "from_sink_queries:changed", "--to", str(tmp_path / "chk_new"),
                        "--backfill-from-sink", "--no-sink-check"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "rows check skipped" in r.stdout
    assert _rows(env["FS_OUT"]) == _expected(range(4))
    r = subprocess.run([BIN, "migrate", "from_sink_queries:changed", "--to", str(tmp_path / "x"),
                        "--no-sink-check"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "goes with --backfill-from-sink" in r.stderr


def _window_rows(path: str) -> list[tuple]:
    from increments.sinks.delta import read_table
    t = read_table(path)[0]
    cols = ["window", "campaign_id", "count", "revenue"]
    return sorted(tuple(json.dumps(r[c], default=str) for c in cols) for r in t.select(cols).to_pylist())


def test_from_sink_stateful_changed_query_sees_the_old_batches(tmp_path, monkeypatch):
    """A windowed aggregation as the new version of the bronze query: the backfill's batches are the
    old query's batches (one file each), so the result equals the aggregation run from scratch over
    all the files with the same trigger (run here on a full copy of the input)."""
    import shutil
    full = tmp_path / "full"
    for f in range(7):
        _file(str(full), f)
    env = _old_ran(tmp_path, monkeypatch, 6, gone=3)
    _file(str(tmp_path / "in"), 6)                      # lands after the old query's last batch
    res, lines = _migrate(tmp_path, "windowed")
    assert [r["phase"] for r in res.rounds] == ["sink", "source"] and res.rounds[0]["batches"] == 6, lines
    scratch = dict(env, FS_IN=str(full), FS_CHK=str(tmp_path / "chk_scratch"), FS_OUT=str(tmp_path / "scratch"))
    _run(scratch, "windowed")
    assert _window_rows(env["FS_OUT"]) == _window_rows(scratch["FS_OUT"]) != []
    shutil.rmtree(full)


def test_from_sink_crash_during_the_backfill_resumes(tmp_path, monkeypatch):
    """migrate killed (SIGKILL) right after backfill batch 2 reached the staging table, before its
    commit: a second migrate redoes batch 2 from the same table commits (the staging sink skips what
    it holds), goes on, and the result counts every row once."""
    env = _old_ran(tmp_path, monkeypatch, 5, gone=2)
    crash = dict(env, FS_CRASH_BATCH="2")
    r = subprocess.run([BIN, "migrate", "from_sink_queries:crashing", "--to", str(tmp_path / "chk_new"),
                        "--backfill-from-sink"], env=crash, capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, r.stdout + r.stderr[-2000:]
    from deltalake import DeltaTable
    assert DeltaTable(str(tmp_path / "out__migrate")).transaction_version(
        json.load(open(tmp_path / "chk_new" / "metadata.json"))["id"]) == 2
    r = subprocess.run([BIN, "migrate", "from_sink_queries:changed", "--to", str(tmp_path / "chk_new"),
                        "--backfill-from-sink"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert _rows(env["FS_OUT"]) == _expected(range(5))


def _produce(bootstrap: str, topic: str, n0: int, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n0, n0 + n):
        p.produce(topic, value=json.dumps({"campaign_id": f"c{i % 3}", "amount": i}).encode(), partition=i % 2)
    p.flush(10)


def test_from_sink_kafka_continues_at_the_old_partition_offsets(tmp_path, monkeypatch, kafka_broker):
    """A raw landing table of a 2-partition topic, migrated to a query that parses the values: the
    backfill reads the table under the old query's per-partition offsets, then the source continues
    at exactly those offsets (each message once: no (partition, offset) twice or missing). Tansu has
    no DeleteRecords, so the topic keeps its early records here; the hand-over is what is tested."""
    from broker import create_topic
    topic = create_topic(kafka_broker, partitions=2)
    _produce(kafka_broker, topic, 0, 40)
    env = dict(_env(tmp_path, "chk_old"), FS_KAFKA=kafka_broker, FS_TOPIC=topic)
    _run(env, "kafka_raw")
    for k, v in env.items():
        if k.startswith("FS_"):
            monkeypatch.setenv(k, v)
    sys.path.insert(0, HERE)
    _produce(kafka_broker, topic, 40, 20)               # after the old query's last batch
    res, lines = _migrate(tmp_path, "kafka_parsed")
    assert res.rounds[0]["phase"] == "sink" and res.rounds[0]["input_rows"] == 40, lines
    assert sum(r["input_rows"] for r in res.rounds[1:]) == 20, lines
    got = _rows(env["FS_OUT"], ("partition", "offset", "campaign_id", "amount"))
    want = sorted((i % 2, i // 2, f"c{i % 3}", i) for i in range(60) if i % 2 == 0)
    assert got == want


def test_from_sink_on_an_object_store(tmp_path, monkeypatch, s3_bucket, pg_url):
    """Checkpoints and the table on S3 (moto), the log on PostgreSQL: the old table's log and data
    files are read through the store, the new checkpoint's sources/0 is seeded there, the staging
    table is removed from the bucket after the switch."""
    import boto3
    env = _old_ran(tmp_path, monkeypatch, 5, gone=2, log=pg_url, FS_CHK=f"{s3_bucket}/chk_old",
                   FS_OUT=f"{s3_bucket}/out")
    _file(str(tmp_path / "in"), 5)
    res, lines = _migrate(tmp_path, to=f"{s3_bucket}/chk_new")
    assert [r["phase"] for r in res.rounds] == ["sink", "source"] and res.rounds[0]["input_rows"] == 5 * 8, lines
    assert _rows(env["FS_OUT"]) == _expected(range(6))
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=s3_bucket[5:]).get("Contents", [])]
    assert not [k for k in keys if k.startswith("out__migrate/")]
    assert "chk_new/sources/0/4.json" in keys and "chk_old/retired.json" in keys
    _file(str(tmp_path / "in"), 6)
    _run(dict(env, FS_CHK=f"{s3_bucket}/chk_new"), "changed")
    assert _rows(env["FS_OUT"]) == _expected(range(7))

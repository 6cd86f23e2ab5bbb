"""Issue 28 item 2: a lost log together with log.json, or a checkpoint written before log.json moved
to an empty log_url, is refused when the checkpoint (sources/, state/, staging/) or the sink shows
the query ran; the message names what was found and `increments migrate-log`. Real SQLite and
PostgreSQL logs, a real Delta sink; the other sinks' markers (Parquet manifests, PostgreSQL marker
row, Iceberg table property, Kafka marker group) as the only evidence."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from deltalake import DeltaTable

import increments as inc
from increments import functions as F

SCHEMA = "id BIGINT, k STRING, event_time TIMESTAMP"


def _files(d, start: int, n: int) -> None:
    os.makedirs(d, exist_ok=True)
    for f in range(start, start + n):
        with open(os.path.join(d, f"f-{f:03d}.json"), "w") as fh:
            for i in range(3):
                fh.write(json.dumps({"id": f * 10 + i, "k": f"k{i}", "event_time": f"2026-01-01T00:{f:02d}:0{i}Z"}) + "\n")


def _start(inp, chk, out, windowed=False, **opts):
    frame = inc.read_stream.files(inp, "json", SCHEMA, max_files_per_trigger=1)
    if windowed:
        frame = frame.with_watermark("event_time", "1 minute").group_by(F.window("event_time", "1 minute")).count()
    w = (frame.write_stream.format("delta").output_mode("append").checkpoint_location(chk).query_name("lost")
         .trigger(available_now=True))
    for k, v in opts.items():
        w = w.option(k, v)
    return w.start(out)


def _run(*a, **kw):
    q = _start(*a, **kw)
    q.await_termination()
    assert q.exception() is None


def _forget_engines() -> None:
    from increments.checkpoint.log import _ENGINES
    for url in [u for u in _ENGINES if u.startswith("sqlite")]:
        _ENGINES.pop(url).dispose()


def _rows(out) -> int:
    return DeltaTable(out).to_pyarrow_table().num_rows


@pytest.fixture
def paths(tmp_path):
    return str(tmp_path / "in"), str(tmp_path / "chk"), str(tmp_path / "out")


def _lose_log(chk):
    _forget_engines()                         # as a new process: no pooled connection to the old file
    for name in ("log.sqlite", "log.sqlite-wal", "log.sqlite-shm", "log.json"):
        if os.path.exists(os.path.join(chk, name)):
            os.remove(os.path.join(chk, name))


@pytest.mark.parametrize("windowed", [False, True])
def test_log_sqlite_and_log_json_deleted_is_refused(paths, windowed):
    inp, chk, out = paths
    _files(inp, 0, 3)
    _run(inp, chk, out, windowed=windowed)
    before = _rows(out)
    _lose_log(chk)
    _files(inp, 3, 2)
    with pytest.raises(inc.IncompatibleCheckpointError) as ei:
        _start(inp, chk, out, windowed=windowed)
    msg = str(ei.value)
    assert "shows the query ran" in msg and os.path.join(chk, "sources") in msg
    assert (os.path.join(chk, "state") in msg) == windowed
    assert "holds no history of query id" in msg and "increments migrate-log" in msg
    assert _rows(out) == before                      # nothing written, no batch 0 again
    assert not os.path.exists(os.path.join(chk, "log.json"))


def test_an_older_checkpoint_moved_to_an_empty_postgres_log_is_refused(paths, pg_url):
    """A checkpoint written before log.json existed (here: log.json removed) started on a new,
    empty log_url: refused; with the original log it goes on, each row once."""
    inp, chk, out = paths
    _files(inp, 0, 2)
    _run(inp, chk, out)
    os.remove(os.path.join(chk, "log.json"))
    _files(inp, 2, 1)
    with pytest.raises(inc.IncompatibleCheckpointError) as ei:
        _start(inp, chk, out, log_url=pg_url)
    msg = str(ei.value)
    assert "postgresql database" in msg and "shows the query ran" in msg and "migrate-log" in msg
    assert _rows(out) == 6
    _run(inp, chk, out)                              # the original (embedded) log: goes on, log.json again
    assert sorted(DeltaTable(out).to_pyarrow_table().column("id").to_pylist()) == \
        sorted(f * 10 + i for f in range(3) for i in range(3))
    assert os.path.exists(os.path.join(chk, "log.json"))


def test_only_the_sinks_app_transaction_shows_the_query_ran(paths):
    """sources/ gone too: the Delta sink's app transaction (the query id) is the evidence."""
    inp, chk, out = paths
    _files(inp, 0, 2)
    _run(inp, chk, out)
    _lose_log(chk)
    shutil.rmtree(os.path.join(chk, "sources"))
    with pytest.raises(inc.IncompatibleCheckpointError) as ei:
        _start(inp, chk, out)
    assert "the sink's output of query id" in str(ei.value)
    assert _rows(out) == 6


def test_a_checkpoint_that_never_ran_a_batch_still_starts_on_a_new_log(paths, tmp_path):
    """metadata.json and conf.json only (a first start stopped before its first plan): no refusal."""
    inp, chk, out = paths
    os.makedirs(inp)
    _run(inp, chk, out)                              # no file: no batch
    _lose_log(chk)
    _files(inp, 0, 1)
    _run(inp, chk, out, log_url="sqlite:///" + str(tmp_path / "new.sqlite"))
    assert _rows(out) == 3


def _sink_target(fmt, tmp_path, request):
    """(start target, options) of a sink of format `fmt` whose evidence outlives the checkpoint's log."""
    import uuid
    if fmt == "parquet":
        return str(tmp_path / "out"), {}
    if fmt == "postgres":
        return None, {"url": request.getfixturevalue("pg_url"), "table": "lost_" + uuid.uuid4().hex[:8]}
    if fmt == "iceberg":      # a catalog of its own (the default one lives in the query's log, lost with it)
        return "lake.lost", {"catalog": {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db",
                                         "warehouse": f"file://{tmp_path}/wh"}}
    from broker import create_topic
    broker = request.getfixturevalue("kafka_txn_broker")
    return None, {"kafka.bootstrap.servers": broker, "topic": create_topic(broker)}


@pytest.mark.parametrize("fmt", ["parquet", "postgres", "iceberg", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_only_the_sinks_marker_shows_the_query_ran(tmp_path, fmt, request):
    """sources/ gone too: a Parquet sink's _manifest entries of this query id, the PostgreSQL
    sink's marker row, the Iceberg table's marker property, the Kafka marker group's offset."""
    inp, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    target, opts = _sink_target(fmt, tmp_path, request)
    _files(inp, 0, 2)

    def start():
        frame = inc.read_stream.files(inp, "json", SCHEMA, max_files_per_trigger=1)
        if fmt == "kafka":
            frame = frame.select("CAST(id AS VARCHAR) AS value")
        w = (frame.write_stream.format(fmt).output_mode("append").checkpoint_location(chk).query_name("lost")
             .trigger(available_now=True))
        for k, v in opts.items():
            w = w.option(k, v)
        return w.start(target) if target else w.start()
    q = start()
    q.await_termination()
    assert q.exception() is None
    _lose_log(chk)
    for d in ("sources", "state", "staging"):
        shutil.rmtree(os.path.join(chk, d), ignore_errors=True)
    with pytest.raises(inc.IncompatibleCheckpointError) as ei:
        start()
    assert f"the sink's output of query id {q.id}" in str(ei.value) and "migrate-log" in str(ei.value)

"""Issue 15 items 1-3 and 8: a checkpoint refuses a log, a lost file or another query that would
lose or duplicate rows, naming what to fix (real SQLite/PostgreSQL logs, real Delta sink)."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil

import pytest
from deltalake import DeltaTable

import increments as inc
from increments import cli
from increments import functions as F

SCHEMA = "id BIGINT, campaign_id STRING, event_time TIMESTAMP"


def _files(d, start: int, n: int) -> None:
    os.makedirs(d, exist_ok=True)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for f in range(start, start + n):
        with open(os.path.join(d, f"f-{f:03d}.json"), "w") as fh:
            for i in range(3):
                t = t0 + dt.timedelta(minutes=f * 12 + i)
                fh.write(json.dumps({"id": f * 10 + i, "campaign_id": f"c{i}",
                                     "event_time": t.isoformat().replace("+00:00", "Z")}) + "\n")


def _copy(inp, chk, out, **opts):
    w = (inc.read_stream.files(inp, "json", SCHEMA, max_files_per_trigger=1).write_stream.format("delta")
         .output_mode("append").checkpoint_location(chk).query_name("copy").trigger(available_now=True))
    for k, v in opts.items():
        w = w.option(k, v)
    return w.start(out)


def _run(inp, chk, out, **opts):
    q = _copy(inp, chk, out, **opts)
    q.await_termination()
    assert q.exception() is None, q.exception()


def _ids(out) -> list[int]:
    return sorted(DeltaTable(out).to_pyarrow_table().column("id").to_pylist())


def _forget_engines() -> None:
    from increments.checkpoint.log import _ENGINES
    for url in [u for u in _ENGINES if u.startswith("sqlite")]:
        _ENGINES.pop(url).dispose()


@pytest.fixture
def paths(tmp_path):
    return str(tmp_path / "in"), str(tmp_path / "chk"), str(tmp_path / "out")


# -- 1. the log belongs to the checkpoint ------------------------------------------------------------
def test_log_switched_to_an_empty_postgres_is_refused_then_migrated(paths, pg_url, capsys):
    inp, chk, out = paths
    _files(inp, 0, 3)
    _run(inp, chk, out)                                   # embedded SQLite log: batches 0-2
    assert json.load(open(os.path.join(chk, "log.json")))["dialect"] == "sqlite"
    _files(inp, 3, 1)
    with pytest.raises(inc.IncompatibleCheckpointError) as ei:
        _copy(inp, chk, out, log_url=pg_url)
    msg = str(ei.value)
    assert "holds no history" in msg and "sqlite file" in msg and "migrate-log" in msg and "log_url" in msg
    assert len(_ids(out)) == 9                            # nothing written by the refused start
    # the documented way: copy the log, then restart on it
    assert cli.main(["migrate-log", chk, "--to", pg_url]) == 0
    assert "copied 3 rows of increments_offsets" in capsys.readouterr().out
    _run(inp, chk, out, log_url=pg_url)
    assert _ids(out) == sorted(f * 10 + i for f in range(4) for i in range(3))      # each row once
    assert json.load(open(os.path.join(chk, "log.json")))["dialect"] == "postgresql"
    # ... and the embedded log is now the wrong one
    _files(inp, 4, 1)
    with pytest.raises(inc.IncompatibleCheckpointError, match="was copied to postgresql database"):
        _copy(inp, chk, out)


def test_a_lost_log_sqlite_is_refused(paths):
    inp, chk, out = paths
    _files(inp, 0, 3)
    _run(inp, chk, out)
    _forget_engines()                        # as a new process: no pooled connection to the old file
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(os.path.join(chk, "log.sqlite" + suffix)):
            os.remove(os.path.join(chk, "log.sqlite" + suffix))
    _files(inp, 3, 2)
    with pytest.raises(inc.IncompatibleCheckpointError, match="holds no history of query id"):
        _copy(inp, chk, out)
    assert len(_ids(out)) == 9


def test_migrate_log_refuses_a_target_that_holds_the_query(paths, tmp_path):
    inp, chk, out = paths
    _files(inp, 0, 1)
    _run(inp, chk, out)
    target = "sqlite:///" + str(tmp_path / "other.sqlite")
    assert cli.main(["migrate-log", chk, "--to", target]) == 0
    with pytest.raises(SystemExit, match="already copied to sqlite file"):
        cli.main(["migrate-log", chk, "--to", target])
    with pytest.raises(SystemExit, match="already holds rows"):
        cli.main(["migrate-log", chk, "--from", target, "--to", target])


# -- 2. metadata.json lost ------------------------------------------------------------------------------
def test_lost_metadata_is_restored_when_log_and_delta_sink_agree(paths):
    inp, chk, out = paths
    _files(inp, 0, 2)
    _run(inp, chk, out)
    qid = json.load(open(os.path.join(chk, "metadata.json")))["id"]
    os.remove(os.path.join(chk, "metadata.json"))
    _files(inp, 2, 1)
    _run(inp, chk, out)
    assert json.load(open(os.path.join(chk, "metadata.json")))["id"] == qid
    assert _ids(out) == sorted(f * 10 + i for f in range(3) for i in range(3))   # 9 rows, none twice


def test_lost_metadata_is_refused_when_the_sink_cannot_tell(paths):
    inp, chk, _ = paths
    _files(inp, 0, 2)
    got = []

    def start():
        return (inc.read_stream.files(inp, "json", SCHEMA, max_files_per_trigger=1).write_stream
                .foreach_batch(lambda t, b: got.append(t.num_rows)).checkpoint_location(chk).query_name("fe")
                .trigger(available_now=True).start())
    start().await_termination()
    os.remove(os.path.join(chk, "metadata.json"))
    with pytest.raises(inc.IncompatibleCheckpointError) as ei:
        start()
    msg = str(ei.value)
    assert os.path.join(chk, "metadata.json") in msg and "is missing" in msg and "cannot tell" in msg
    assert got == [3, 3]


def test_lost_metadata_and_log_file_is_refused(paths):
    inp, chk, out = paths
    _files(inp, 0, 2)
    _run(inp, chk, out)
    os.remove(os.path.join(chk, "metadata.json"))
    os.remove(os.path.join(chk, "log.json"))
    with pytest.raises(inc.IncompatibleCheckpointError, match="metadata.json .*is missing"):
        _copy(inp, chk, out)
    assert len(_ids(out)) == 6


# -- 3. another query's checkpoint, a lost conf.json ----------------------------------------------------
def _windowed(inp, chk, got, partitions=4):
    return (inc.read_stream.files(inp, "json", SCHEMA, max_files_per_trigger=1)
            .with_watermark("event_time", "5 minutes").group_by(F.window("event_time", "10 minutes")).count()
            .write_stream.foreach_batch(lambda t, b: got.extend(t.to_pylist())).output_mode("append")
            .option("state_partitions", partitions).checkpoint_location(chk).query_name("w")
            .trigger(available_now=True))


def test_a_stateless_query_on_a_windowed_checkpoint_is_refused(paths):
    inp, chk, out = paths
    _files(inp, 0, 3)
    got: list = []
    _windowed(inp, chk, got).start().await_termination()
    with pytest.raises(inc.IncompatibleCheckpointError) as ei:
        _copy(inp, chk, out)
    msg = str(ei.value)
    assert """stateful_operators: checkpoint has ["0:stateStoreSave keys=['window']"]""" in msg
    assert "this start has []" in msg and "sink:" in msg and "new checkpoint location" in msg
    assert not os.path.exists(out)


def test_lost_conf_and_fewer_partitions_is_refused(paths):
    inp, chk, _ = paths
    _files(inp, 0, 3)
    got: list = []
    _windowed(inp, chk, got, partitions=4).start().await_termination()
    os.remove(os.path.join(chk, "conf.json"))
    with pytest.raises(inc.IncompatibleCheckpointError, match="state_partitions: checkpoint has 4, this start asks for 2"):
        _windowed(inp, chk, got, partitions=2).start()
    # conf.json was put back from the log: the original query runs on
    assert json.load(open(os.path.join(chk, "conf.json")))["state_partitions"] == 4
    q = _windowed(inp, chk, got, partitions=4).start()
    q.await_termination()
    assert q.exception() is None


def test_lost_conf_of_an_older_checkpoint_is_checked_against_the_offsets_log(paths):
    """A checkpoint whose log has no identity row yet (an earlier release): the partitions recorded
    in offsets[N] are the reference."""
    import sqlalchemy as sa
    inp, chk, _ = paths
    _files(inp, 0, 2)
    got: list = []
    _windowed(inp, chk, got, partitions=4).start().await_termination()
    eng = sa.create_engine("sqlite:///" + os.path.join(chk, "log.sqlite"))
    with eng.begin() as c:
        c.execute(sa.text("DELETE FROM increments_queries"))
    eng.dispose()
    os.remove(os.path.join(chk, "log.json"))
    os.remove(os.path.join(chk, "conf.json"))
    with pytest.raises(inc.IncompatibleCheckpointError, match="state_partitions: checkpoint has 4, this start asks for 2"):
        _windowed(inp, chk, got, partitions=2).start()


# -- 8. damaged checkpoint files name themselves -----------------------------------------------------------
@pytest.mark.parametrize("name", ["metadata.json", "conf.json"])
def test_garbage_checkpoint_file_is_named(paths, name):
    inp, chk, out = paths
    _files(inp, 0, 1)
    _run(inp, chk, out)
    with open(os.path.join(chk, name), "w") as f:
        f.write("{not json")
    with pytest.raises(inc.IncompatibleCheckpointError) as ei:
        _copy(inp, chk, out)
    assert os.path.join(chk, name) in str(ei.value) and "not valid JSON" in str(ei.value)


def test_unwritable_checkpoint_names_the_path(paths, tmp_path):
    inp, _, out = paths
    _files(inp, 0, 1)
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    chk = str(blocker / "chk")                    # a checkpoint below a regular file cannot be created
    with pytest.raises(inc.IncrementsError) as ei:
        _copy(inp, chk, out)
    assert chk in str(ei.value)
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("sink", ["postgres", "parquet"])
def test_lost_metadata_is_restored_when_the_log_and_the_sink_agree(paths, pg_url, sink):
    """The PostgreSQL sink's marker row and a Parquet manifest name the query id too."""
    import uuid

    import sqlalchemy as sa

    from increments.sinks.parquet import read_parquet_sink
    inp, chk, out = paths
    table = "mix_" + uuid.uuid4().hex[:8]

    def run():
        w = (inc.read_stream.files(inp, "json", SCHEMA, max_files_per_trigger=1).write_stream.format(sink)
             .checkpoint_location(chk).query_name("copy").trigger(available_now=True).option("log_url", pg_url))
        q = w.option("url", pg_url).option("table", table).start() if sink == "postgres" else w.start(out)
        q.await_termination()

    def ids():
        if sink == "parquet":
            return sorted(read_parquet_sink(out).column("id").to_pylist())
        with sa.create_engine(pg_url, poolclass=sa.pool.NullPool).connect() as c:
            return sorted(r[0] for r in c.execute(sa.text(f"SELECT id FROM {table}")))
    _files(inp, 0, 2)
    run()
    os.remove(os.path.join(chk, "metadata.json"))
    _files(inp, 2, 1)
    run()
    assert ids() == sorted(f * 10 + i for f in range(3) for i in range(3))

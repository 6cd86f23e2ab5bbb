"""format("iceberg"): pyiceberg SQL catalogs on SQLite (the query's own log by default) and
PostgreSQL, tables on local disk and on the moto S3 server; one snapshot per batch with the
query and batch ids, redo skipped, a concurrent writer of the same query refused, schema checks.
(Kill-at-every-step: tests/faults/test_crash_matrix.py, sink "iceberg".)"""
from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
import pytest

import increments as inc
from increments import functions as F
from increments.errors import SinkSchemaError, StreamingQueryException
from increments.sinks.base import SinkContext
from increments.sinks.iceberg import IcebergSink

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _load(catalog: dict, name: str):
    from pyiceberg.catalog import load_catalog
    props = dict(catalog)
    return load_catalog(props.pop("name", "increments"), **props).load_table(name)


def _ours(snapshot) -> dict:
    return {k: v for k, v in snapshot.summary.additional_properties.items() if k.startswith("increments.")}


def _windowed(mode: str, catalog: dict, chk, name: str):
    src = inc.read_stream.memory("k STRING, t TIMESTAMP")
    agg = src.with_watermark("t", "1 minute").group_by(F.window("t", "10 minutes"), "k").count()
    w = (agg.write_stream.format("iceberg").output_mode(mode).option("catalog", catalog)
         .checkpoint_location(str(chk)).query_name(f"ice_{mode}").trigger(available_now=True))
    return src, w


def _rows(table) -> list[tuple]:
    return sorted((r["window"]["start"], r["k"], r["count"]) for r in table.scan().to_arrow().to_pylist())


def _feed(src, w, name):
    src.add_data([{"k": "a", "t": T0}, {"k": "b", "t": T0 + dt.timedelta(minutes=1)}])
    q = w.start(name)
    q.await_termination()
    src.add_data([{"k": "a", "t": T0 + dt.timedelta(minutes=2)}, {"k": "c", "t": T0 + dt.timedelta(minutes=30)}])
    q = w.start(name)
    q.await_termination()
    return q


def test_append_on_the_querys_own_sqlite_log_one_snapshot_per_batch(tmp_path):
    catalog = {"warehouse": f"file://{tmp_path}/wh"}       # no uri: the SQL catalog lives in the query's log
    src, w = _windowed("append", catalog, tmp_path / "chk", "lake.clicks")
    q = _feed(src, w, "lake.clicks")
    from increments.checkpoint.log import resolve_log_url
    from increments.storage import location
    cat = {**catalog, "type": "sql", "uri": resolve_log_url(None, location(str(tmp_path / "chk")))}
    t = _load(cat, "lake.clicks")
    assert _rows(t) == [(T0, "a", 2), (T0, "b", 1)]         # the 00:30 window is still open
    written = [s for s in t.snapshots() if _ours(s)]
    assert [int(_ours(s)["increments.batch-id"]) for s in written] == [
        p["batch_id"] for p in q.recent_progress if p["sink"]["num_output_rows"]]
    assert all(_ours(s)["increments.query-id"] == q.id for s in written)
    assert q.recent_progress[-1]["sink"]["version"] in (None, t.current_snapshot().snapshot_id)


def test_update_and_complete_on_a_postgres_catalog(tmp_path, pg_url):
    catalog = {"type": "sql", "uri": pg_url, "warehouse": f"file://{tmp_path}/wh", "name": "pg"}
    src, w = _windowed("update", catalog, tmp_path / "chk_u", "gold.updates")
    _feed(src, w, "gold.updates")
    t = _load(catalog, "gold.updates")
    assert _rows(t) == [(T0, "a", 2), (T0, "b", 1), (T0 + dt.timedelta(minutes=30), "c", 1)]
    ops = [s.summary.operation.value for s in t.snapshots()]
    assert ops[0] == "append" and set(ops[1:]) <= {"overwrite"}

    src2 = inc.read_stream.memory("k STRING")
    w2 = (src2.group_by("k").count().write_stream.format("iceberg").output_mode("complete")
          .option("catalog", catalog).checkpoint_location(str(tmp_path / "chk_c")).trigger(available_now=True))
    for rows in ([{"k": "a"}, {"k": "b"}], [{"k": "a"}]):
        src2.add_data(rows)
        w2.start("gold.totals").await_termination()
    t2 = _load(catalog, "gold.totals")
    assert sorted(t2.scan().to_arrow().to_pylist(), key=str) == [{"k": "a", "count": 2}, {"k": "b", "count": 1}]
    assert len(t2.snapshots()) == 2


def test_a_table_on_the_s3_server(tmp_path, s3_bucket, s3_server):
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db", "warehouse": f"{s3_bucket}/warehouse"}
    src, w = _windowed("append", catalog, tmp_path / "chk", "s3ns.t")
    _feed(src, w, "s3ns.t")
    t = _load({**catalog, "s3.endpoint": s3_server}, "s3ns.t")
    assert t.location().startswith(s3_bucket)
    assert _rows(t) == [(T0, "a", 2), (T0, "b", 1)]


def _sink(catalog, query_id, name, mode="append", keys=None, chk=None):
    s = IcebergSink(name, {"catalog": catalog})
    s.open(SinkContext(query_id, "direct", mode, chk, key_columns=keys or []))
    return s


def test_a_redo_is_skipped_and_a_second_writer_of_the_query_cannot_commit_the_same_batch(tmp_path):
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db", "warehouse": f"file://{tmp_path}/wh"}
    qid = str(uuid.uuid4())
    first = _sink(catalog, qid, "ns.t")
    assert first.add_batch(0, pa.table({"v": [1, 2]})).num_output_rows == 2
    again = _sink(catalog, qid, "ns.t")                    # the restarted process
    r = again.add_batch(0, pa.table({"v": [1, 2]}))
    assert r.skipped_replay and r.num_output_rows == 0
    zombie = _sink(catalog, qid, "ns.t")
    zombie._tbl = zombie._load()                           # it read the table (marker 0) ...
    assert again.add_batch(1, pa.table({"v": [3]})).num_output_rows == 1    # ... then the winner commits 1
    r = zombie.add_batch(1, pa.table({"v": [3]}))          # its commit fails, it reloads and skips
    assert r.skipped_replay
    t = _load(catalog, "ns.t")
    assert sorted(t.scan().to_arrow().column("v").to_pylist()) == [1, 2, 3]
    assert t.properties[f"increments.last-batch-id.{qid}"] == "1"
    assert again.holds_query(qid) and not again.holds_query("other")


def test_an_output_that_does_not_fit_the_table_is_refused_naming_the_columns(tmp_path):
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db", "warehouse": f"file://{tmp_path}/wh"}
    _sink(catalog, "q1", "ns.t").add_batch(0, pa.table({"v": [1], "s": ["x"]}))
    with pytest.raises(SinkSchemaError, match=r"column 's' \(string\) is in the table but not in the query's output"):
        _sink(catalog, "q2", "ns.t").add_batch(0, pa.table({"v": [1]}))
    assert _load(catalog, "ns.t").scan().to_arrow().num_rows == 1
    with pytest.raises(ValueError, match="update mode needs result keys"):
        _sink(catalog, "q3", "ns.t", mode="update").add_batch(0, pa.table({"v": [1], "s": ["x"]}))


def test_a_bad_table_name_fails_at_start(tmp_path):
    src = inc.read_stream.memory("v BIGINT")
    with pytest.raises(ValueError, match="is not 'namespace.table'"):
        src.write_stream.format("iceberg").option("catalog", {}).checkpoint_location(str(tmp_path)).start("plain")
    w = (src.write_stream.format("iceberg").option("catalog", {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db"})
         .checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True))
    src.add_data([{"v": 1}])
    with pytest.raises(StreamingQueryException, match="warehouse"):
        w.start("ns.t").await_termination()

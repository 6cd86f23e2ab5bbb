"""format("postgres"): append / update (upsert) / complete in one transaction with a batch marker."""
from __future__ import annotations

from datetime import datetime, timezone

import psycopg
import pyarrow as pa
import pytest
import sqlalchemy as sa

import increments as inc
from increments.sinks.base import SinkContext
from increments.sinks.postgres import PostgresSink


def _sink(url, table, mode, keys=(), qid="q-1"):
    s = PostgresSink({"url": url, "table": table})
    s.open(SinkContext(qid, "q", mode, "/unused", list(keys)))
    return s


def _rows(url, sql):
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with eng.connect() as c:
        return sorted(tuple(r) for r in c.execute(sa.text(sql)))


def test_query_appends_rows_with_all_types(tmp_path, pg_url):
    mem = inc.read_stream.memory("id BIGINT, name STRING, ts TIMESTAMP, x DOUBLE, ok BOOLEAN")
    q = (mem.select("id", "name", "ts", "x", "ok", "CAST(name AS BLOB) AS raw")
         .write_stream.format("postgres").option("url", pg_url).option("table", "events")
         .checkpoint_location(str(tmp_path / "chk")).start())
    mem.add_data([{"id": 1, "name": 'a "quoted", b', "ts": datetime(2024, 1, 1, 10, tzinfo=timezone.utc), "x": 1.5, "ok": True},
                  {"id": 2, "name": "", "ts": None, "x": None, "ok": None}])
    q.process_all_available()
    mem.add_data([{"id": 3, "name": None, "ts": datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=timezone.utc), "x": -2.0, "ok": False}])
    q.process_all_available()
    q.stop()
    rows = _rows(pg_url, "SELECT id, name, ts, x, ok, raw FROM events")
    assert rows == [
        (1, 'a "quoted", b', datetime(2024, 1, 1, 10, tzinfo=timezone.utc), 1.5, True, b'a "quoted", b'),
        (2, "", None, None, None, b""),
        (3, None, datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=timezone.utc), -2.0, False, None)]
    assert _rows(pg_url, f"SELECT last_batch_id FROM increments_sink_batches WHERE query_id = '{q.id}'") == [(1,)]


def test_append_replay_is_a_no_op(pg_url):
    s = _sink(pg_url, "t_append", "append")
    assert s.add_batch(0, pa.table({"id": [1, 2]})).num_output_rows == 2
    assert s.add_batch(0, pa.table({"id": [1, 2]})).skipped_replay
    s.add_batch(1, pa.table({"id": [3]}))
    assert s.add_batch(1, pa.table({"id": [3]})).skipped_replay
    assert _rows(pg_url, "SELECT id FROM t_append") == [(1,), (2,), (3,)]


def test_update_upserts_on_keys_with_flattened_window(pg_url):
    ts = lambda h: datetime(2024, 1, 1, h, tzinfo=timezone.utc)  # noqa: E731
    w = pa.StructArray.from_arrays([pa.array([ts(0), ts(1)], pa.timestamp("us", tz="UTC")),
                                    pa.array([ts(1), ts(2)], pa.timestamp("us", tz="UTC"))], ["start", "end"])
    s = _sink(pg_url, "t_update", "update", keys=["window", "c"])
    s.add_batch(0, pa.table({"window": w, "c": ["x", "x"], "count": [1, 5]}))
    s.add_batch(1, pa.table({"window": w.slice(0, 1), "c": ["x"], "count": [3]}))
    assert s.add_batch(1, pa.table({"window": w.slice(0, 1), "c": ["x"], "count": [99]})).skipped_replay
    assert _rows(pg_url, "SELECT window_start, window_end, c, count FROM t_update") == [
        (ts(0), ts(1), "x", 3), (ts(1), ts(2), "x", 5)]


def test_complete_replaces_the_table(pg_url):
    s = _sink(pg_url, "t_complete", "complete", keys=["k"])
    s.add_batch(0, pa.table({"k": ["a", "b"], "n": [1, 1]}))
    s.add_batch(1, pa.table({"k": ["a"], "n": [2]}))
    assert s.add_batch(1, pa.table({"k": ["a"], "n": [2]})).skipped_replay
    assert _rows(pg_url, "SELECT k, n FROM t_complete") == [("a", 2)]


def test_two_queries_into_one_table_have_separate_markers(pg_url):
    a, b = _sink(pg_url, "t_shared", "append", qid="qa"), _sink(pg_url, "t_shared", "append", qid="qb")
    a.add_batch(0, pa.table({"id": [1]}))
    b.add_batch(0, pa.table({"id": [2]}))
    assert _rows(pg_url, "SELECT id FROM t_shared") == [(1,), (2,)]


def test_one_driver_postgresql_urls_mean_psycopg_and_another_driver_is_refused(pg_url):
    plain = pg_url.replace("postgresql+psycopg://", "postgresql://")
    s = _sink(plain, "t_plain_url", "append")
    assert s.engine().dialect.driver == "psycopg"
    s.add_batch(0, pa.table({"id": [1]}))
    assert _rows(pg_url, "SELECT id FROM t_plain_url") == [(1,)]
    with pytest.raises(ValueError, match="names the driver 'psycopg2'.*psycopg 3"):
        PostgresSink({"url": pg_url.replace("+psycopg://", "+psycopg2://"), "table": "t"})


def test_statements_quote_names_whatever_they_hold(pg_url):
    # names are psycopg.sql identifiers: quotes, colons, percent signs and dots inside a column are data
    cols = ['a "b"', ":c", "d%s", "e.f"]
    s = _sink(pg_url, 'odd "t" %s', "update", keys=[":c"])
    s.add_batch(0, pa.table({c: [1, 2] for c in cols}))
    s.add_batch(1, pa.table({c: [2, 3] for c in cols}))
    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://")) as c:   # no parameters: % is data
        got = sorted(c.execute('SELECT "a ""b""", ":c", "d%s", "e.f" FROM "odd ""t"" %s"').fetchall())
    assert got == [(1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)]
    assert s.row_count() == 3

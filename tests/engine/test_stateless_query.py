"""A file-source stateless query over several batches: order, rate limits, triggers, formats."""
from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import increments as inc

SCHEMA = "id BIGINT, name STRING, ts TIMESTAMP"


def _json_file(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _rows(start, n):
    return [{"id": i, "name": f"n{i}", "ts": f"2024-01-01T10:00:{i % 60:02d}Z"} for i in range(start, start + n)]


def _collect():
    got = {}

    def fn(table, batch_id):
        got[batch_id] = table
    return got, fn


def test_batches_follow_file_name_order_one_file_per_trigger(tmp_path, log_url):
    d = tmp_path / "in"
    d.mkdir()
    for name, start in [("b.json", 10), ("a.json", 0), ("c.json", 20)]:
        _json_file(d / name, _rows(start, 3))
    (d / ".hidden.json").write_text("not json")
    (d / "_temporary").write_text("not json")
    got, fn = _collect()
    q = (inc.read_stream.files(str(d), "json", SCHEMA, max_files_per_trigger=1)
         .filter("id % 2 = 0").select("id", "upper(name) AS name")
         .write_stream.foreach_batch(fn).checkpoint_location(str(tmp_path / "chk")).option("log_url", log_url)
         .trigger(available_now=True).start())
    q.await_termination()
    assert sorted(got) == [0, 1, 2]
    assert got[0].to_pydict() == {"id": [0, 2], "name": ["N0", "N2"]}
    assert got[1].to_pydict() == {"id": [10, 12], "name": ["N10", "N12"]}
    assert got[2].to_pydict() == {"id": [20, 22], "name": ["N20", "N22"]}
    assert [p["num_input_rows"] for p in q.recent_progress] == [3, 3, 3]
    # a restart sees nothing new: each file once
    got2, fn2 = _collect()
    q2 = (inc.read_stream.files(str(d), "json", SCHEMA, max_files_per_trigger=1).select("id")
          .write_stream.foreach_batch(fn2).checkpoint_location(str(tmp_path / "chk")).option("log_url", log_url)
          .trigger(available_now=True).start())
    q2.await_termination()
    assert got2 == {}
    # a new file is picked up by the next run, as batch 3, with the same query id
    _json_file(d / "d.json", _rows(30, 2))
    q3 = (inc.read_stream.files(str(d), "json", SCHEMA, max_files_per_trigger=1).select("id")
          .write_stream.foreach_batch(fn2).checkpoint_location(str(tmp_path / "chk")).option("log_url", log_url)
          .trigger(available_now=True).start())
    q3.await_termination()
    assert list(got2) == [3] and got2[3].column("id").to_pylist() == [30, 31]
    assert q3.id == q.id


def test_available_now_ignores_files_that_arrive_after_start(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for i in range(3):
        _json_file(d / f"f{i}.json", _rows(i * 10, 2))
    got = {}
    added = []

    def fn(table, batch_id):
        got[batch_id] = table.num_rows
        if batch_id == 0:
            _json_file(d / "f9.json", _rows(90, 2))
            added.append(True)
    q = (inc.read_stream.files(str(d), "json", SCHEMA, max_files_per_trigger=2).select("id")
         .write_stream.foreach_batch(fn).checkpoint_location(str(tmp_path / "chk"))
         .trigger(available_now=True).start())
    q.await_termination()
    assert added and got == {0: 4, 1: 2}


def test_once_takes_everything_in_one_batch(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for i in range(3):
        _json_file(d / f"f{i}.json", _rows(i * 10, 2))
    got, fn = _collect()
    q = (inc.read_stream.files(str(d), "json", SCHEMA, max_files_per_trigger=1).select("id")
         .write_stream.foreach_batch(fn).checkpoint_location(str(tmp_path / "chk")).trigger(once=True).start())
    q.await_termination()
    assert list(got) == [0] and got[0].num_rows == 6


def test_processing_time_runs_nothing_when_idle(tmp_path, log_url):
    d = tmp_path / "in"
    d.mkdir()
    _json_file(d / "f0.json", _rows(0, 2))
    got, fn = _collect()
    q = (inc.read_stream.files(str(d), "json", SCHEMA).select("id")
         .write_stream.foreach_batch(fn).checkpoint_location(str(tmp_path / "chk")).option("log_url", log_url)
         .trigger(processing_time="200 milliseconds").start())
    try:
        q.process_all_available()
        assert list(got) == [0]
        q.process_all_available()
        q.process_all_available()
        assert list(got) == [0], "idle intervals must not run batches"
        _json_file(d / "f1.json", _rows(10, 3))
        q.process_all_available()
        assert list(got) == [0, 1] and got[1].num_rows == 3
    finally:
        q.stop()
    assert not q.is_active
    log = q.runtime.log
    assert log.latest_offsets().batch_id == 1 and log.latest_commit().batch_id == 1


def test_memory_source_and_memory_sink(tmp_path):
    src = inc.read_stream.memory("k STRING, v BIGINT")
    q = src.with_column("v2", "v * v").write_stream.format("memory").query_name("mem_t").start()
    src.add_data([{"k": "a", "v": 2}, {"k": "b", "v": 3}])
    q.process_all_available()
    src.add_data([("c", 4)])
    q.process_all_available()
    q.stop()
    assert inc.memory_table("mem_t").to_pydict() == {"k": ["a", "b", "c"], "v": [2, 3, 4], "v2": [4, 9, 16]}
    assert sorted(inc.memory_batches("mem_t")) == [0, 1]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_csv_and_parquet_sources(tmp_path, fmt):
    d = tmp_path / "in"
    d.mkdir()
    for f in range(2):
        if fmt == "csv":
            (d / f"f{f}.csv").write_text("".join(f"{i},n{i},2024-01-01 10:00:0{i % 10}Z\n" for i in range(f * 5, f * 5 + 5)))
        else:
            t = pa.table({"id": pa.array(range(f * 5, f * 5 + 5), pa.int64()), "name": [f"n{i}" for i in range(f * 5, f * 5 + 5)],
                          "ts": pa.array([1_704_103_200_000_000] * 5, pa.timestamp("us", tz="UTC"))})
            pq.write_table(t, d / f"f{f}.parquet")
    got, fn = _collect()
    q = (inc.read_stream.files(str(d), fmt, SCHEMA, max_files_per_trigger=1).where("id >= 3").select("id", "name", "ts")
         .write_stream.foreach_batch(fn).checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True).start())
    q.await_termination()
    assert got[0].column("id").to_pylist() == [3, 4]
    assert got[1].column("id").to_pylist() == [5, 6, 7, 8, 9]
    assert got[0].schema.field("ts").type == pa.timestamp("us", tz="UTC")


def test_parse_json_over_a_text_column(tmp_path):
    src = inc.read_stream.memory("value STRING, offset BIGINT")
    q = (src.parse_json("user STRING, n BIGINT, at TIMESTAMP", keep=["offset"]).write_stream.format("memory")
         .query_name("pj").start())
    src.add_data([('{"user": "u1", "n": 5, "at": "2024-01-01T00:00:00Z"}', 0),
                  ('{"user": "u2", "extra": true}', 1)])
    q.process_all_available()
    q.stop()
    t = inc.memory_table("pj")
    assert t.column_names == ["user", "n", "at", "offset"]
    assert t.column("user").to_pylist() == ["u1", "u2"] and t.column("n").to_pylist() == [5, None]


def test_progress_report_fields_and_listener(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    _json_file(d / "f0.json", _rows(0, 4))
    events = []

    class L(inc.StreamingQueryListener):
        def on_query_started(self, e):
            events.append(("started", e["name"]))

        def on_query_progress(self, p):
            events.append(("progress", p["batch_id"]))

        def on_query_terminated(self, e):
            events.append(("terminated", e["exception"]))
    q = (inc.read_stream.files(str(d), "json", SCHEMA).with_watermark("ts", "10 seconds").select("id", "ts")
         .write_stream.format("memory").query_name("prog").listener(L()).checkpoint_location(str(tmp_path / "chk"))
         .trigger(available_now=True).start())
    q.await_termination()
    p = q.last_progress
    for k in ("id", "run_id", "name", "batch_id", "timestamp", "num_input_rows", "input_rows_per_second",
              "processed_rows_per_second", "duration_ms", "event_time", "state_operators", "sources", "sink"):
        assert k in p, k
    assert set(p["duration_ms"]) >= {"trigger_execution", "latest_offset", "get_batch", "add_batch", "wal_commit",
                                      "commit_offsets"}
    assert p["event_time"] == {"watermark": "1970-01-01T00:00:00.000Z", "max": "2024-01-01T10:00:03.000Z",
                               "min": "2024-01-01T10:00:00.000Z", "avg": "2024-01-01T10:00:01.500Z"}
    src = p["sources"][0]
    assert src["description"].startswith("FileStreamSource[") and src["start_offset"] == -1 and src["end_offset"] == 0
    assert src["num_input_rows"] == 4 and p["sink"]["num_output_rows"] == 4
    assert events == [("started", "prog"), ("progress", 0), ("terminated", None)]


def test_one_frame_feeds_two_queries_each_with_its_own_checkpoint(tmp_path):
    """As in Spark, one stream frame can be started twice (two sinks): each query reads every file
    once into its own checkpoint, whenever the other was started."""
    d = tmp_path / "in"
    d.mkdir()
    for k in range(2):
        _json_file(d / f"f{k}.json", _rows(k * 10, 2))
    frame = inc.read_stream.files(str(d), "json", SCHEMA, max_files_per_trigger=1).select("id")
    got = {"a": [], "b": []}

    def start(name):
        return (frame.write_stream.foreach_batch(lambda t, b: got[name].extend(t.column("id").to_pylist()))
                .checkpoint_location(str(tmp_path / f"chk_{name}")).trigger(processing_time="20 milliseconds").start())
    qa = start("a")
    qa.process_all_available()
    qb = start("b")
    qb.process_all_available()
    for k in range(2, 4):
        _json_file(d / f"f{k}.json", _rows(k * 10, 2))
    qa.process_all_available()
    qb.process_all_available()
    qa.stop(), qb.stop()
    assert qa.exception() is None and qb.exception() is None
    everything = [k * 10 + i for k in range(4) for i in range(2)]
    assert sorted(got["a"]) == everything and sorted(got["b"]) == everything
    for name in ("a", "b"):
        assert sorted(os.listdir(tmp_path / f"chk_{name}" / "sources" / "0")) == ["0.json", "1.json", "2.json", "3.json"]


def test_empty_batches_keep_the_output_schema_and_row_making_queries_still_run(tmp_path):
    """An empty input skips DuckDB after its first answer, which must change nothing the sink sees:
    the same (empty) table with the query's output schema; and a projection that makes a row out of
    no rows (an aggregate in select, run per batch as DuckDB does) still makes it in every batch."""
    from increments.execution import steps
    src = inc.read_stream.memory("id BIGINT, name STRING")
    got = []
    rt = (src.filter("id >= 0").select("id", "upper(name) AS name", "id * 2 AS twice").write_stream
          .foreach_batch(lambda t, b: got.append(t)).checkpoint_location(str(tmp_path / "a")).build())
    counts = []
    rt2 = (src.select("count(*) AS n").write_stream.foreach_batch(lambda t, b: counts.append(t.to_pylist()))
           .checkpoint_location(str(tmp_path / "b")).build())
    try:
        for rows in ([], [], [(1, "x")], []):
            src.add_data(rows)
            steps.run_one_batch(rt)
            steps.run_one_batch(rt2)
    finally:
        rt.close()
        rt2.close()
    assert [t.num_rows for t in got] == [0, 0, 1, 0]
    assert all(t.schema == rt.plan.output_schema for t in got)
    assert got[2].to_pylist() == [{"id": 1, "name": "X", "twice": 2}]
    assert counts == [[{"n": 0}], [{"n": 0}], [{"n": 1}], [{"n": 0}]]

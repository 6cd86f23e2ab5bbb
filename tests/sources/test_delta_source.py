"""read_stream.delta(path): new files of a real Delta table, commit by commit."""
from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import increments as inc


def _collect():
    got = {}

    def fn(table, batch_id):
        got[batch_id] = table
    return got, fn


def _run(frame, chk, fn, log_url):
    q = (frame.write_stream.foreach_batch(fn).checkpoint_location(str(chk)).option("log_url", log_url)
         .trigger(available_now=True).start())
    q.await_termination()
    return q


def _ids(got):
    return sorted(i for t in got.values() for i in t.column("id").to_pylist())


def test_existing_rows_then_each_new_commit_once(tmp_path, log_url):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1, 2], "name": ["a", "b"]}))
    write_deltalake(path, pa.table({"id": [3], "name": ["c"]}), mode="append")
    got, fn = _collect()
    frame = inc.read_stream.delta(path).filter("id <> 2").select("id", "name")
    q = _run(frame, tmp_path / "chk", fn, log_url)
    assert list(got) == [0] and _ids(got) == [1, 3]
    assert q.last_progress["sources"][0]["end_offset"] == {"version": 1, "index": 1}
    write_deltalake(path, pa.table({"id": [4, 5], "name": ["d", "e"]}), mode="append")
    got2, fn2 = _collect()
    _run(frame, tmp_path / "chk", fn2, log_url)
    assert list(got2) == [1] and _ids(got2) == [4, 5]
    got3, fn3 = _collect()
    _run(frame, tmp_path / "chk", fn3, log_url)
    assert got3 == {}


def test_max_files_per_trigger_and_partition_columns(tmp_path, log_url):
    path = str(tmp_path / "t")
    for day, ids in [("d1", [1, 2]), ("d2", [3]), ("d1", [4]), ("d3", [5, 6])]:
        write_deltalake(path, pa.table({"id": ids, "day": [day] * len(ids)}), mode="append", partition_by=["day"])
    got, fn = _collect()
    _run(inc.read_stream.delta(path, max_files_per_trigger=1), tmp_path / "chk", fn, log_url)
    assert len(got) == 4 and all(t.num_rows for t in got.values())
    rows = sorted((i, d) for t in got.values() for i, d in zip(t.column("id").to_pylist(), t.column("day").to_pylist()))
    assert rows == [(1, "d1"), (2, "d1"), (3, "d2"), (4, "d1"), (5, "d3"), (6, "d3")]


def test_a_delete_fails_the_stream_naming_the_version(tmp_path, log_url):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1, 2]}))
    got, fn = _collect()
    _run(inc.read_stream.delta(path), tmp_path / "chk", fn, log_url)
    DeltaTable(path).delete("id = 1")
    with pytest.raises(inc.StreamingQueryException, match="version 1 of the table removed or rewrote"):
        _run(inc.read_stream.delta(path), tmp_path / "chk", fn, log_url)
    got2, fn2 = _collect()
    _run(inc.read_stream.delta(path, ignore_changes=True), tmp_path / "chk", fn2, log_url)
    assert _ids(got2) == [2]


def test_delta_to_delta_stream(tmp_path):
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    write_deltalake(src, pa.table({"id": [1, 2, 3]}))
    w = (inc.read_stream.delta(src).select("id", "id * 10 AS x").write_stream.format("delta")
         .checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True))
    w.start(out).await_termination()
    write_deltalake(src, pa.table({"id": [4]}), mode="append")
    w.start(out).await_termination()
    t = DeltaTable(out).to_pyarrow_table()
    assert sorted(t.column("x").to_pylist()) == [10, 20, 30, 40]

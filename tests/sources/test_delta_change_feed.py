"""read_stream.delta(path, read_change_feed=True): a real Delta table's change data feed, batch by
batch by version, checked against deltalake's own load_cdf of the same versions."""
from __future__ import annotations

import glob
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import increments as inc

CDF = {"delta.enableChangeDataFeed": "true"}


def _collect():
    got: dict[int, list[dict]] = {}

    def fn(table, batch_id):
        got[batch_id] = table.to_pylist()
    return got, fn


def _run(frame, chk, fn, log_url=None):
    w = frame.write_stream.foreach_batch(fn).checkpoint_location(str(chk)).trigger(available_now=True)
    if log_url:
        w = w.option("log_url", log_url)
    q = w.start()
    q.await_termination()
    return q


def _changes(rows):
    return sorted((r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in rows)


def _history_table(path):
    """v0 create (3 rows), v1 append, v2 merge (update 2, insert 5), v3 delete 3, v4 optimize
    (no data change), v5 update 1."""
    write_deltalake(path, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), configuration=CDF)
    write_deltalake(path, pa.table({"id": [4], "v": ["d"]}), mode="append")
    (DeltaTable(path).merge(pa.table({"id": [2, 5], "v": ["B", "e"]}), "t.id = s.id", source_alias="s",
                            target_alias="t").when_matched_update_all().when_not_matched_insert_all().execute())
    DeltaTable(path).delete("id = 3")
    DeltaTable(path).optimize.compact()
    DeltaTable(path).update({"v": "'AA'"}, predicate="id = 1")


def _load_cdf(path, start):
    t = pa.table(DeltaTable(path).load_cdf(starting_version=start).read_all())
    return sorted((r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in t.to_pylist())


def test_one_version_per_batch_matches_load_cdf(tmp_path, log_url):
    path = str(tmp_path / "t")
    _history_table(path)
    got, fn = _collect()
    q = _run(inc.read_stream.delta(path, read_change_feed=True, starting_version=0, max_files_per_trigger=1),
             tmp_path / "chk", fn, log_url)
    # the optimize (version 4) holds no change: no batch of its own
    assert [sorted({r["_commit_version"] for r in rows}) for rows in got.values()] == [[0], [1], [2], [3], [5]]
    assert _changes(r for rows in got.values() for r in rows) == _load_cdf(path, 0)
    assert {r["_change_type"] for rows in got.values() for r in rows} == {
        "insert", "update_preimage", "update_postimage", "delete"}
    ts = {r["_commit_version"]: r["_commit_timestamp"] for rows in got.values() for r in rows}
    cdf = pa.table(DeltaTable(path).load_cdf(starting_version=0).read_all()).to_pylist()
    assert all(ts[r["_commit_version"]].replace(tzinfo=None) == r["_commit_timestamp"] for r in cdf)
    assert q.last_progress["sources"][0]["end_offset"] == {"version": 5}
    assert q.last_progress["sources"][0]["versions"] == [5, 5]


def test_without_starting_version_the_snapshot_comes_first_as_inserts(tmp_path, log_url):
    path = str(tmp_path / "t")
    _history_table(path)
    got, fn = _collect()
    frame = inc.read_stream.delta(path, read_change_feed=True)
    _run(frame, tmp_path / "chk", fn, log_url)
    assert list(got) == [0]
    assert _changes(got[0]) == [(1, "AA", "insert", 5), (2, "B", "insert", 5), (4, "d", "insert", 5),
                                (5, "e", "insert", 5)]
    DeltaTable(path).delete("id = 4")
    write_deltalake(path, pa.table({"id": [6], "v": ["f"]}), mode="append")
    got2, fn2 = _collect()
    _run(frame, tmp_path / "chk", fn2, log_url)         # a restart reads each later change once
    assert list(got2) == [1]
    assert _changes(got2[1]) == [(4, "d", "delete", 6), (6, "f", "insert", 7)]
    got3, fn3 = _collect()
    _run(frame, tmp_path / "chk", fn3, log_url)
    assert got3 == {}


def test_starting_version_latest_reads_only_later_changes(tmp_path):
    path = str(tmp_path / "t")
    _history_table(path)
    frame = inc.read_stream.delta(path, read_change_feed=True, starting_version="latest")
    got, fn = _collect()
    _run(frame, tmp_path / "chk", fn)
    assert got == {}
    write_deltalake(path, pa.table({"id": [7], "v": ["g"]}), mode="append")
    _run(frame, tmp_path / "chk", fn)
    assert [_changes(rows) for rows in got.values()] == [[(7, "g", "insert", 6)]]


def test_rate_limits_admit_whole_versions(tmp_path):
    """A merge into a partitioned table writes several cdc files in one version: a version is never
    split, even past max_files_per_trigger; max_bytes_per_trigger is a soft limit (one version)."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"], "p": ["x", "y", "z", "x"]}),
                    partition_by=["p"], configuration=CDF)
    (DeltaTable(path).merge(pa.table({"id": [1, 2, 3], "v": ["A", "B", "C"], "p": ["x", "y", "z"]}),
                            "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_update_all().execute())
    write_deltalake(path, pa.table({"id": [5], "v": ["e"], "p": ["y"]}), mode="append", partition_by=["p"])
    v1_files = [a for line in open(os.path.join(path, "_delta_log", f"{1:020d}.json"))
                for a in [__import__("json").loads(line)] if "cdc" in a]
    assert len(v1_files) >= 2, "the merge must write one cdc file per partition"
    for i, (kw, batches) in enumerate([({"max_files_per_trigger": 1}, [[0], [1], [2]]),
                        ({"max_files_per_trigger": 4}, [[0, 1], [2]]),
                        ({"max_bytes_per_trigger": 1}, [[0], [1], [2]]),
                        ({}, [[0, 1, 2]])]):
        got, fn = _collect()
        _run(inc.read_stream.delta(path, read_change_feed=True, starting_version=0, **kw),
             tmp_path / f"chk{i}", fn)
        assert [sorted({r["_commit_version"] for r in rows}) for rows in got.values()] == batches, kw
        assert sorted((r["id"], r["p"], r["_change_type"]) for rows in got.values() for r in rows
                      if r["_commit_version"] == 1) == [
            (1, "x", "update_postimage"), (1, "x", "update_preimage"), (2, "y", "update_postimage"),
            (2, "y", "update_preimage"), (3, "z", "update_postimage"), (3, "z", "update_preimage")]


def test_a_version_without_change_data_fails_naming_table_and_version(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1], "v": ["a"]}))
    write_deltalake(path, pa.table({"id": [2], "v": ["b"]}), mode="append")
    DeltaTable(path).alter.set_table_properties(CDF)            # version 2
    write_deltalake(path, pa.table({"id": [3], "v": ["c"]}), mode="append")
    got, fn = _collect()
    with pytest.raises(inc.StreamingQueryException) as e:
        _run(inc.read_stream.delta(path, read_change_feed=True, starting_version=1), tmp_path / "chk", fn)
    msg = str(e.value.cause)
    assert "version 1 of the table" in msg and path in msg and "enableChangeDataFeed" in msg
    assert got == {}
    _run(inc.read_stream.delta(path, read_change_feed=True, starting_version=2), tmp_path / "chk2", fn)
    assert [_changes(rows) for rows in got.values()] == [[(3, "c", "insert", 3)]]


def _vacuum_v1(path):
    """Version 1's cdc file removed from disk, as VACUUM does once it is past retention."""
    text = open(os.path.join(path, "_delta_log", f"{1:020d}.json")).read()
    import json
    cdc = [json.loads(x)["cdc"]["path"] for x in text.splitlines() if '"cdc"' in x]
    for p in cdc:
        os.remove(os.path.join(path, p))
    return cdc


def test_a_vacuumed_version_fails_or_is_skipped(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1, 2], "v": ["a", "b"]}), configuration=CDF)
    DeltaTable(path).update({"v": "'B'"}, predicate="id = 2")
    write_deltalake(path, pa.table({"id": [3], "v": ["c"]}), mode="append")
    gone = _vacuum_v1(path)
    got, fn = _collect()
    with pytest.raises(inc.StreamingQueryException) as e:
        _run(inc.read_stream.delta(path, read_change_feed=True, starting_version=0, max_files_per_trigger=1),
             tmp_path / "chk", fn)
    assert isinstance(e.value.cause, inc.DataLossError)
    assert "version 1" in str(e.value.cause) and os.path.basename(gone[0]) in str(e.value.cause)
    assert list(got) == [0]
    got2, fn2 = _collect()
    q = _run(inc.read_stream.delta(path, read_change_feed=True, starting_version=0, max_files_per_trigger=1,
                                   fail_on_data_loss=False), tmp_path / "chk2", fn2)
    assert [_changes(rows) for rows in got2.values()] == [
        [(1, "a", "insert", 0), (2, "b", "insert", 0)], [], [(3, "c", "insert", 2)]]
    lost = [p["sources"][0].get("data_loss") for p in q.recent_progress]
    assert lost[1] and "version 1" in lost[1][0] and lost[0] is None and lost[2] is None


def test_a_cleaned_up_log_entry_fails_or_is_skipped(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1], "v": ["a"]}), configuration=CDF)
    write_deltalake(path, pa.table({"id": [2], "v": ["b"]}), mode="append")
    write_deltalake(path, pa.table({"id": [3], "v": ["c"]}), mode="append")
    DeltaTable(path).create_checkpoint()
    os.remove(os.path.join(path, "_delta_log", f"{1:020d}.json"))
    with pytest.raises(inc.StreamingQueryException, match="log entry of version 1"):
        _run(inc.read_stream.delta(path, read_change_feed=True, starting_version=0), tmp_path / "chk", lambda t, b: 0)
    got, fn = _collect()
    q = _run(inc.read_stream.delta(path, read_change_feed=True, starting_version=0, fail_on_data_loss=False),
             tmp_path / "chk2", fn)
    assert _changes(r for rows in got.values() for r in rows) == [(1, "a", "insert", 0), (3, "c", "insert", 2)]
    assert any("version 1" in m for p in q.recent_progress for m in p["sources"][0].get("data_loss") or [])


def test_change_feed_of_a_stream_written_table(tmp_path):
    """A Delta sink's table (created by a query) read by another query's change feed: the
    bronze -> silver link of a medallion chain. Schema: the table's columns plus the three."""
    bronze = str(tmp_path / "bronze")
    write_deltalake(bronze, pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.string())}),
                    configuration=CDF)
    write_deltalake(bronze, pa.table({"id": [1, 2], "v": ["a", "b"]}), mode="append")
    frame = inc.read_stream.delta(bronze, read_change_feed=True, starting_version=1)
    assert frame.schema.names == ["id", "v", "_change_type", "_commit_version", "_commit_timestamp"]
    assert frame.schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    out = str(tmp_path / "out")
    (frame.filter("_change_type = 'insert'").select("id", "v", "_commit_version").write_stream.format("delta")
     .checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True).start(out).await_termination())
    assert sorted(DeltaTable(out).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "a", "_commit_version": 1}, {"id": 2, "v": "b", "_commit_version": 1}]
    assert not glob.glob(os.path.join(out, "_change_data", "*"))

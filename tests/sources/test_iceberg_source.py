"""read_stream.iceberg: appended snapshots read incrementally (offsets = snapshot ids), rate
limits, overwrite/delete/replace snapshots, an expired snapshot failing clearly; read.iceberg as
the static side of a join, re-read every batch."""
from __future__ import annotations

import pyarrow as pa
import pytest

import increments as inc
from increments.errors import StreamingQueryException


@pytest.fixture
def catalog(tmp_path):
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db", "warehouse": f"file://{tmp_path}/wh"}


def _table(catalog, name="src.events"):
    from pyiceberg.catalog import load_catalog
    c = load_catalog("increments", **catalog)
    try:
        c.create_namespace(name.split(".")[0])
    except Exception:  # noqa: BLE001 - exists
        pass
    return c.create_table(name, schema=pa.schema([("id", pa.int64()), ("name", pa.string())]))


def _append(t, ids):
    t.append(pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}))
    return t.current_snapshot().snapshot_id


def _collect(tmp_path, catalog, chk="chk", **kw):
    out: dict[int, list[int]] = {}

    def fb(table, batch_id):
        out[batch_id] = sorted(table.column("id").to_pylist())
    q = (inc.read_stream.iceberg("src.events", catalog=catalog, **kw).write_stream.foreach_batch(fb)
         .checkpoint_location(str(tmp_path / chk)).trigger(available_now=True).start())
    q.await_termination()
    return out, q


def test_each_appended_snapshot_is_read_once_offsets_are_snapshot_ids(tmp_path, catalog):
    t = _table(catalog)
    s1, s2 = _append(t, [1, 2]), _append(t, [3])
    out, q = _collect(tmp_path, catalog, max_files_per_trigger=1)
    assert out == {0: [1, 2], 1: [3]}
    assert q.recent_progress[0]["sources"][0]["end_offset"] == {"snapshot_id": s1, "index": 1}
    assert q.recent_progress[1]["sources"][0]["end_offset"] == {"snapshot_id": s2, "index": 1}
    _append(t, [4, 5])
    out, _ = _collect(tmp_path, catalog, max_files_per_trigger=1)    # the restart reads only the new snapshot
    assert out == {2: [4, 5]}


def test_rows_per_trigger_splits_snapshots_at_file_bounds(tmp_path, catalog):
    t = _table(catalog)
    for ids in ([1], [2, 3], [4], [5]):
        _append(t, ids)
    out, _ = _collect(tmp_path, catalog, max_rows_per_trigger=2)
    assert out == {0: [1], 1: [2, 3], 2: [4, 5]}
    out2, _ = _collect(tmp_path, catalog, chk="chk_all")
    assert out2 == {0: [1, 2, 3, 4, 5]}


def test_an_overwrite_snapshot_fails_the_stream_unless_skipped_and_compaction_is_skipped(tmp_path, catalog):
    from increments.sinks import iceberg_table as I
    t = _table(catalog)
    _append(t, [1])
    t.overwrite(pa.table({"id": pa.array([9], pa.int64()), "name": ["n9"]}))    # pyiceberg: a delete, an append
    with pytest.raises(StreamingQueryException, match=r"is a delete.*skip_delete_snapshots=True"):
        _collect(tmp_path, catalog)
    from increments.sinks.base import SinkContext
    from increments.sinks.iceberg import IcebergSink
    s = IcebergSink("src.events", {"catalog": catalog})
    s.open(SinkContext("q", "q", "complete", None))
    s.add_batch(0, pa.table({"id": pa.array([7], pa.int64()), "name": ["n7"]}))    # one overwrite snapshot
    with pytest.raises(StreamingQueryException, match=r"is an overwrite.*skip_overwrite_snapshots=True"):
        _collect(tmp_path, catalog, chk="chk2", skip_delete_snapshots=True)
    t = t.refresh()
    _append(t, [2])
    with t.transaction() as tx:                        # a compaction: the same rows in a new file
        rows = t.scan().to_arrow()
        with I.replace_files(tx, t, {"increments.maintenance": "compact"}) as snap:
            for task in t.scan().plan_files():
                snap.delete_data_file(task.file)
            for f in I.write_files(tx, t, rows):
                snap.append_data_file(f)
    assert t.refresh().current_snapshot().summary.operation.value == "replace"
    out, _ = _collect(tmp_path, catalog, chk="chk_skip", skip_overwrite_snapshots=True, skip_delete_snapshots=True)
    assert out == {0: [1, 2, 9]}       # the delete, the overwrite and the compaction skipped; the appends read


def test_an_expired_snapshot_fails_the_stream_naming_it(tmp_path, catalog):
    t = _table(catalog)
    s1 = _append(t, [1])
    _collect(tmp_path, catalog)
    _append(t, [2])
    t.maintenance.expire_snapshots().by_id(s1).commit()
    with pytest.raises(StreamingQueryException, match=rf"snapshot {s1}.*expired"):
        _collect(tmp_path, catalog)


def test_read_iceberg_as_static_side_is_reread_every_batch(tmp_path, catalog):
    from pyiceberg.catalog import load_catalog
    c = load_catalog("increments", **catalog)
    c.create_namespace("dim")
    dim = c.create_table("dim.names", schema=pa.schema([("k", pa.string()), ("label", pa.string())]))
    dim.append(pa.table({"k": ["a"], "label": ["first"]}))
    src = inc.read_stream.memory("k STRING")
    joined = src.join(inc.read.iceberg("dim.names", catalog=catalog), ["k"])
    seen: list[list[tuple]] = []
    w = (joined.write_stream.foreach_batch(lambda tb, b: seen.append(sorted((r["k"], r["label"]) for r in tb.to_pylist())))
         .checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True))
    src.add_data([{"k": "a"}])
    w.start().await_termination()
    dim.overwrite(pa.table({"k": ["a"], "label": ["second"]}))
    src.add_data([{"k": "a"}])
    w.start().await_termination()
    assert seen == [[("a", "first")], [("a", "second")]]

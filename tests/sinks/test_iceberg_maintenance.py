"""Iceberg maintenance (sinks/iceberg_maintenance.py): compaction into one REPLACE snapshot, expiry
and deletion of the files only expired snapshots referenced, while the sink keeps its exactly-once
marker and a stream over the table skips the compaction."""
from __future__ import annotations

import os

import pyarrow as pa

import increments as inc
from increments.sinks.base import SinkContext
from increments.sinks.iceberg import IcebergSink
from increments.sinks.iceberg_maintenance import maintain


def test_compact_and_expire_keep_the_rows_the_marker_and_the_stream(tmp_path):
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db", "warehouse": f"file://{tmp_path}/wh"}
    sink = IcebergSink("lake.t", {"catalog": catalog})
    sink.open(SinkContext("q-maint", "maint", "append", None))
    for b in range(5):
        sink.add_batch(b, pa.table({"v": pa.array([b * 10, b * 10 + 1], pa.int64())}))
    data_dir = tmp_path / "wh" / "lake" / "t" / "data"
    assert len(os.listdir(data_dir)) == 5
    m = maintain("lake.t", catalog, retention_ms=0)
    assert (m["files_before"], m["files_removed"], m["files_added"], m["files_after"]) == (5, 5, 1, 1)
    assert m["snapshots_expired"] == 5 and m["files_deleted"] > 5
    assert len(os.listdir(data_dir)) == 1                 # the five small files are gone from disk
    from pyiceberg.catalog import load_catalog
    t = load_catalog("increments", **catalog).load_table("lake.t")
    assert sorted(t.scan().to_arrow().column("v").to_pylist()) == sorted(v for b in range(5) for v in (b * 10, b * 10 + 1))
    assert [s.summary.operation.value for s in t.snapshots()] == ["replace"]
    again = IcebergSink("lake.t", {"catalog": catalog})   # a redo after the maintenance: still skipped
    again.open(SinkContext("q-maint", "maint", "append", None))
    assert again.add_batch(4, pa.table({"v": pa.array([40, 41], pa.int64())})).skipped_replay
    again.add_batch(5, pa.table({"v": pa.array([50], pa.int64())}))
    seen = []
    (inc.read_stream.iceberg("lake.t", catalog=catalog).write_stream
     .foreach_batch(lambda tb, b: seen.extend(tb.column("v").to_pylist()))
     .checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True).start().await_termination())
    assert seen == [50]                                   # the replace snapshot is skipped; only the append after it

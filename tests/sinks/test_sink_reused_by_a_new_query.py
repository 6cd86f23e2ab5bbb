"""Issue 28 item 5: a sink path (or table) reused by a new query -- a new checkpoint, so a new query
id -- gets every batch of the new query, none skipped because the old query's output holds the
same batch ids; the first start warns, naming the other writers. Old Parquet manifests (keyed by
batch id only) still make a redo of their own query a replay. Real Parquet files, Delta tables,
PostgreSQL."""
from __future__ import annotations

import json
import logging
import os
import uuid

import pyarrow as pa
import pytest
import sqlalchemy as sa
from deltalake import DeltaTable

import increments as inc
from increments.sinks.parquet import ParquetSink, read_parquet_sink
from increments.sinks.base import SinkContext

SCHEMA = "id BIGINT, name STRING"


def _files(d, start, n):
    os.makedirs(d, exist_ok=True)
    for f in range(start, start + n):
        with open(os.path.join(d, f"f-{f:03d}.json"), "w") as fh:
            fh.write("".join(json.dumps({"id": f * 10 + i, "name": f"n{i}"}) + "\n" for i in range(2)))


def _run(inp, chk, fmt, target, select=None, **opts):
    frame = inc.read_stream.files(inp, "json", SCHEMA, max_files_per_trigger=1)
    if select:
        frame = frame.select(*select)
    w = (frame.write_stream.format(fmt).output_mode("append").checkpoint_location(chk).query_name("reuse")
         .trigger(available_now=True))
    for k, v in opts.items():
        w = w.option(k, v)
    q = w.start(target) if target else w.start()
    q.await_termination()
    assert q.exception() is None
    return q


def _ids(fmt, target, pg_url=None):
    if fmt == "parquet":
        return sorted(read_parquet_sink(target).column("id").to_pylist())
    if fmt == "delta":
        return sorted(DeltaTable(target).to_pyarrow_table().column("id").to_pylist())
    with sa.create_engine(pg_url, poolclass=sa.pool.NullPool).connect() as c:
        return sorted(r[0] for r in c.execute(sa.text(f"SELECT id FROM {target}")))


@pytest.mark.parametrize("fmt", ["parquet", "delta", "postgres"])
def test_a_new_query_on_a_used_sink_writes_all_its_batches(tmp_path, fmt, caplog, request):
    pg_url = request.getfixturevalue("pg_url") if fmt == "postgres" else None
    table = "reuse_" + uuid.uuid4().hex[:8]
    out = str(tmp_path / "out")
    opts = {"url": pg_url, "table": table} if fmt == "postgres" else {}
    target = None if fmt == "postgres" else out
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _files(a, 0, 3)                                   # query 1: batches 0-2
    _run(a, str(tmp_path / "chk1"), fmt, target, **opts)
    _files(b, 5, 4)                                   # query 2, new checkpoint, same sink: batches 0-3
    with caplog.at_level(logging.WARNING, logger="increments.sinks"):
        q = _run(b, str(tmp_path / "chk2"), fmt, target, **opts)
    assert _ids(fmt, table if fmt == "postgres" else out, pg_url) == \
        sorted([f * 10 + i for f in range(3) for i in range(2)] + [f * 10 + i for f in range(5, 9) for i in range(2)])
    warned = " ".join(r.getMessage() for r in caplog.records if r.name == "increments.sinks")
    assert f"id {q.id}" in warned and "already holds" in warned and "none of its batches is skipped" in warned
    # a restart of query 2 on its checkpoint: nothing new, nothing twice, no warning again
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="increments.sinks"):
        _run(b, str(tmp_path / "chk2"), fmt, target, **opts)
    assert not [r for r in caplog.records if r.name == "increments.sinks"]
    assert len(_ids(fmt, table if fmt == "postgres" else out, pg_url)) == 14


def test_a_parquet_manifest_of_an_earlier_release_is_still_a_replay(tmp_path):
    """_manifest/<N>.json (keyed by batch id only) of this query id, or naming none: a redo of N
    is skipped; another query's old entry is not this query's batch."""
    out = str(tmp_path / "out")
    os.makedirs(os.path.join(out, "_manifest"))
    for n, qid in ((0, "q-old"), (1, None), (2, "q-other")):
        body = {"batch_id": n, "files": [], "num_rows": 0, **({"query_id": qid} if qid else {})}
        with open(os.path.join(out, "_manifest", f"{n}.json"), "w") as f:
            json.dump(body, f)
    sink = ParquetSink(out)
    sink.open(SinkContext("q-old", "old", "append", str(tmp_path / "chk")))
    t = pa.table({"id": [1]})
    assert sink.add_batch(0, t).skipped_replay and sink.add_batch(1, t).skipped_replay
    r = sink.add_batch(2, t)
    assert not r.skipped_replay and r.num_output_rows == 1
    assert sink.add_batch(2, t).skipped_replay
    assert read_parquet_sink(out).column("id").to_pylist() == [1]
    assert sink.holds_query("q-old") and sink.holds_query("q-other") and not sink.holds_query("q-new")
    assert "query id q-other (1 batches)" in sink.foreign_output("q-old")


def test_a_dead_letter_table_reused_by_a_new_query_gets_its_rows(tmp_path):
    """Late rows of a new query into the same dead-letter Delta table: keyed by query id too."""
    from increments import functions as F
    dl = str(tmp_path / "late")

    def run(inp, chk):
        q = (inc.read_stream.files(inp, "json", "id BIGINT, t TIMESTAMP", max_files_per_trigger=1)
             .with_watermark("t", "1 minute", late_rows=inc.dead_letter.delta(dl))
             .group_by(F.window("t", "1 minute")).count().write_stream.format("delta").output_mode("append")
             .checkpoint_location(chk).query_name("late").trigger(available_now=True).start(str(tmp_path / "o" / chk[-1])))
        q.await_termination()
        assert q.exception() is None

    for k in ("1", "2"):
        inp = str(tmp_path / f"in{k}")
        os.makedirs(inp)
        with open(os.path.join(inp, "a.json"), "w") as f:
            f.write('{"id": 1, "t": "2026-01-01T00:10:00Z"}\n')
        with open(os.path.join(inp, "b.json"), "w") as f:
            f.write('{"id": 2, "t": "2026-01-01T00:11:00Z"}\n')
        with open(os.path.join(inp, "c.json"), "w") as f:     # late in batch 2 (watermark of batch 1: 00:09)
            f.write(f'{{"id": {k}0, "t": "2026-01-01T00:00:00Z"}}\n')
        run(inp, str(tmp_path / f"chk{k}"))
    assert sorted(DeltaTable(dl).to_pyarrow_table().column("id").to_pylist()) == [10, 20]


def test_a_new_query_on_a_used_iceberg_table_writes_all_its_batches(tmp_path, caplog):
    """The marker is a table property per query id: a new query's batch 0..3 are not the old one's."""
    from pyiceberg.catalog import load_catalog
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _files(a, 0, 3)
    _run(a, str(tmp_path / "chk1"), "iceberg", "lake.reuse", catalog=catalog)
    _files(b, 5, 4)
    with caplog.at_level(logging.WARNING, logger="increments.sinks"):
        q = _run(b, str(tmp_path / "chk2"), "iceberg", "lake.reuse", catalog=catalog)
    props = dict(catalog)
    t = load_catalog("increments", **props).load_table("lake.reuse")
    assert sorted(t.scan().to_arrow().column("id").to_pylist()) == \
        sorted([f * 10 + i for f in range(3) for i in range(2)] + [f * 10 + i for f in range(5, 9) for i in range(2)])
    warned = " ".join(r.getMessage() for r in caplog.records if r.name == "increments.sinks")
    assert f"id {q.id}" in warned and "already holds snapshot" in warned and "(batches up to 2)" in warned
    assert "none of its batches is skipped" in warned
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="increments.sinks"):      # a restart: no warning again
        _run(b, str(tmp_path / "chk2"), "iceberg", "lake.reuse", catalog=catalog)
    assert not [r for r in caplog.records if r.name == "increments.sinks"]


@pytest.mark.kafka
def test_a_new_query_on_a_used_kafka_topic_writes_all_its_batches(kafka_txn_broker, tmp_path, caplog):
    """Transactional id and marker group are keyed by query id: a new query's batches all arrive."""
    from broker import create_topic
    from kafka_testutil import read_committed
    topic = create_topic(kafka_txn_broker)
    opts = {"kafka.bootstrap.servers": kafka_txn_broker, "topic": topic}
    select = ("CAST(id AS VARCHAR) AS value",)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _files(a, 0, 3)
    _run(a, str(tmp_path / "chk1"), "kafka", None, select, **opts)
    _files(b, 5, 4)
    with caplog.at_level(logging.WARNING, logger="increments.sinks"):
        q = _run(b, str(tmp_path / "chk2"), "kafka", None, select, **opts)
    got = sorted(int(v) for _, _, v, _ in read_committed(kafka_txn_broker, topic))
    assert got == sorted([f * 10 + i for f in range(3) for i in range(2)] + [f * 10 + i for f in range(5, 9) for i in range(2)])
    warned = " ".join(r.getMessage() for r in caplog.records if r.name == "increments.sinks")
    assert f"id {q.id}" in warned and f"topic {topic!r} already holds records of other producers" in warned
    assert "none of its batches is skipped" in warned

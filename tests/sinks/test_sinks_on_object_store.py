"""Sinks, dead-letter tables and static reads on S3 (moto's server on loopback) and local disk.

* Delta sink on S3: batches commit once per (query, batch id), a replay is skipped; the query-level
  storage_options reach deltalake (merged under the sink's own); the Delta stream source reads the
  table's commits back through the store.
* Parquet sink on S3: batch_id=N/part-0-<token>.parquet and _manifest/N.<query id>.json, create-only; a
  replayed batch (manifest present) writes nothing; read_parquet_sink reads through the manifests.
* Dead-letter Delta table on S3.
* read.files: a single file, a directory, a glob (files only); a missing path names it.
* Unknown schemes are refused at open().
"""
from __future__ import annotations

import io
import json
import os
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import increments as inc
from increments import storage
from increments.sinks.base import SinkContext
from increments.sinks.delta import DeltaSink
from increments.sinks.parquet import ParquetSink, read_parquet_sink
from increments.sources.delta import DeltaSource


def _ctx(s3_bucket, mode="append", qid="q-1", storage_options=None):
    return SinkContext(qid, "q", mode, storage.location(f"{s3_bucket}/chk"), [], dict(storage_options or {}))


def _t(ids) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "name": [f"n{i}" for i in ids]})


def _env_options() -> dict:
    """The moto server as explicit storage_options (what a user without the AWS env would pass)."""
    return {"AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"], "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"], "AWS_REGION": "us-east-1"}


@pytest.fixture
def no_aws_env(s3_server, monkeypatch):
    """The AWS environment removed: only storage_options can reach the server."""
    opts = _env_options()
    for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ALLOW_HTTP", "AWS_REGION"):
        monkeypatch.delenv(k, raising=False)
    return opts


def test_delta_sink_and_source_on_s3(s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTS_LOCAL_DIR", str(tmp_path / "local"))
    table = f"{s3_bucket}/lake/t"
    sink = DeltaSink(table, {})
    sink.open(_ctx(s3_bucket))
    assert sink.add_batch(0, _t([1, 2])).num_output_rows == 2
    assert sink.add_batch(1, _t([3])).num_output_rows == 1
    again = sink.add_batch(1, _t([3]))                       # a redo after a crash before commits[1]
    assert again.skipped_replay and again.num_output_rows == 0
    from deltalake import DeltaTable
    dt = DeltaTable(table)
    assert dt.version() == 1 and dt.transaction_version("q-1") == 1
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]

    src = DeltaSource(table, max_files_per_trigger=1)
    src.open(storage.location(f"{s3_bucket}/chk"), 0, "q")
    end = src.latest_offset(src.initial_offset())
    assert src.read(src.initial_offset(), end).column("id").to_pylist() == [1, 2]
    end2 = src.latest_offset(end)
    assert src.read(end, end2).column("id").to_pylist() == [3]
    assert src.latest_offset(end2) == end2
    # the static side of a join, through the same store
    assert sorted(inc.read.delta(table).load().column("id").to_pylist()) == [1, 2, 3]


def test_delta_sink_and_source_take_the_query_storage_options(s3_bucket, no_aws_env):
    table = f"{s3_bucket}/lake/opts"
    sink = DeltaSink(table, {})
    sink.open(_ctx(s3_bucket, storage_options=no_aws_env))
    sink.add_batch(0, _t([5]))
    src = DeltaSource(table)
    src.open(storage.location(f"{s3_bucket}/chk", no_aws_env), 0, "q", no_aws_env)
    start = src.initial_offset()
    assert src.read(start, src.latest_offset(start)).column("id").to_pylist() == [5]
    assert inc.read.delta(table, storage_options=no_aws_env).load().num_rows == 1
    assert inc.read.parquet_sink  # noqa: B018  (the reader API is importable without the env)


def test_parquet_sink_on_s3_writes_create_only_and_skips_replays(s3_bucket):
    out = f"{s3_bucket}/out"
    sink = ParquetSink(out)
    sink.open(_ctx(s3_bucket))
    assert sink.add_batch(0, _t([1, 2])).num_output_rows == 2
    assert sink.add_batch(1, _t([3])).num_output_rows == 1
    replay = sink.add_batch(1, _t([3]))
    assert replay.skipped_replay and replay.num_output_rows == 0
    loc = storage.location(out)
    names = [o.name for o in loc.list("")]
    assert names[:2] == ["_manifest/0.q-1.json", "_manifest/1.q-1.json"]
    assert len(names) == 4 and all(n.startswith(("batch_id=0/part-0-", "batch_id=1/part-0-")) for n in names[2:])
    manifest = loc.read_json("_manifest/1.q-1.json")
    assert manifest["num_rows"] == 1 and f"batch_id=1/{manifest['files'][0]}" in names
    # another runner (a zombie) of batch 1 finds it published and writes nothing
    other = ParquetSink(out)
    other.open(_ctx(s3_bucket))
    assert other.add_batch(1, _t([3])).skipped_replay
    assert len(loc.list("")) == 4
    # a data object without a manifest (a crash mid-batch) is invisible
    buf = io.BytesIO()
    pq.write_table(_t([99]), buf)
    loc.write_bytes("batch_id=2/part-0-crashed.parquet", buf.getvalue())
    assert read_parquet_sink(out).column("id").to_pylist() == [1, 2, 3]
    assert inc.read.parquet_sink(out).num_rows == 3


def test_parquet_sink_reads_the_old_local_layout(tmp_path):
    d = tmp_path / "out"
    (d / "batch_id=0").mkdir(parents=True)
    (d / "_manifest").mkdir()
    pq.write_table(_t([4]), d / "batch_id=0" / "part-0.parquet")
    (d / "_manifest" / "0.json").write_text(json.dumps({"batch_id": 0, "files": ["part-0.parquet"], "num_rows": 1}))
    sink = ParquetSink(str(d))
    sink.open(SinkContext("q", "q", "append", storage.location(str(tmp_path / "chk")), []))
    assert sink.add_batch(0, _t([4])).skipped_replay
    sink.add_batch(1, _t([5]))
    assert read_parquet_sink(str(d)).column("id").to_pylist() == [4, 5]


def test_dead_letter_table_on_s3(s3_bucket, no_aws_env):
    dlq = inc.dead_letter.delta(f"{s3_bucket}/dlq")
    ctx = types.SimpleNamespace(query_name="q", batch_id=0, storage_options=no_aws_env)
    bad = pa.table({"value": [b"{nope", b"[1]"]})
    assert dlq.write(ctx, bad, pa.array(["invalid JSON", "not an object"])) == 2
    assert dlq.write(ctx, bad, pa.array(["invalid JSON", "not an object"])) == 2   # the redo writes nothing
    from deltalake import DeltaTable
    t = DeltaTable(f"{s3_bucket}/dlq", storage_options=no_aws_env).to_pyarrow_table()
    assert t.column("value_text").to_pylist() == ["{nope", "[1]"]


def test_unknown_schemes_are_refused_at_open(tmp_path):
    ctx = SinkContext("q", "q", "append", storage.location(str(tmp_path / "chk")), [])
    for sink in (DeltaSink("ftp://h/t", {}), ParquetSink("webdav://h/out")):
        with pytest.raises(storage.UnknownSchemeError, match="unknown scheme"):
            sink.open(ctx)
    with pytest.raises(storage.UnknownSchemeError, match="hdfs://"):
        inc.dead_letter.delta("hdfs://nn/dlq")
    with pytest.raises(storage.UnknownSchemeError, match="hdfs://"):
        inc.read.delta("hdfs://nn/t")


def _put_json(loc, name, ids):
    loc.write_bytes(name, "".join(json.dumps({"id": i}) + "\n" for i in ids).encode())


@pytest.mark.parametrize("where", ["local", "s3"])
def test_read_files_single_file_directory_glob_and_missing(where, tmp_path, request, monkeypatch):
    monkeypatch.setenv("INCREMENTS_LOCAL_DIR", str(tmp_path / "local"))
    base = str(tmp_path / "data") if where == "local" else request.getfixturevalue("s3_bucket") + "/data"
    loc = storage.location(base)
    _put_json(loc, "a.json", [1])
    _put_json(loc, "b.json", [2])
    _put_json(loc, "_c.json", [3])
    _put_json(loc, "x.json/inner.json", [4])           # a "directory" whose name matches the glob
    _put_json(loc, "sub/d.json", [5])

    def ids(path):
        return inc.read.files(path, "json", "id BIGINT").load().column("id").to_pylist()
    assert ids(f"{base}/b.json") == [2]                                     # a single file
    assert ids(base) == [1, 2]                                              # a directory's files
    assert ids(f"{base}/*.json") == [1, 2]                                  # globs match files only
    assert ids(f"{base}/*/*.json") == [5, 4]                                # name order: sub/, x.json/
    with pytest.raises(FileNotFoundError, match=r"read\.files: .*data/nope\.json does not exist"):
        inc.read.files(f"{base}/nope.json", "json", "id BIGINT").load()
    assert ids(f"{base}/nothing-*.json") == []


def _run_query(frame, s3_bucket, pg_url, fmt, target, options=None):
    w = (frame.write_stream.format(fmt).checkpoint_location(f"{s3_bucket}/chk").option("log_url", pg_url)
         .trigger(available_now=True))
    if options:
        w = w.option("storage_options", options)
    q = w.start(target)
    q.await_termination()
    return q


def test_query_from_s3_files_to_an_s3_parquet_sink_with_query_storage_options(s3_bucket, pg_url, tmp_path,
                                                                             monkeypatch, no_aws_env):
    """Input, checkpoint and sink on S3; only the query's storage_options reach the server."""
    monkeypatch.setenv("INCREMENTS_LOCAL_DIR", str(tmp_path / "local"))
    inp = storage.location(f"{s3_bucket}/in", no_aws_env)
    for k in range(3):
        _put_json(inp, f"f{k}.json", [k * 10, k * 10 + 1])

    def frame():
        return inc.read_stream.files(f"{s3_bucket}/in", "json", "id BIGINT", max_files_per_trigger=2)
    out = f"{s3_bucket}/out"
    q = _run_query(frame(), s3_bucket, pg_url, "parquet", out, no_aws_env)
    assert [p["batch_id"] for p in q.recent_progress] == [0, 1]
    _put_json(inp, "f3.json", [30])
    _run_query(frame(), s3_bucket, pg_url, "parquet", out, no_aws_env)
    assert read_parquet_sink(out, no_aws_env).column("id").to_pylist() == [0, 1, 10, 11, 20, 21, 30]
    chk = storage.location(f"{s3_bucket}/chk", no_aws_env)
    assert [o.name for o in chk.list("sources/")] == ["sources/0/0.json", "sources/0/1.json", "sources/0/2.json"]


def test_query_from_an_s3_delta_table_to_an_s3_delta_table(s3_bucket, pg_url, tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTS_LOCAL_DIR", str(tmp_path / "local"))
    from deltalake import DeltaTable, write_deltalake
    src_table, dst_table = f"{s3_bucket}/lake/src", f"{s3_bucket}/lake/dst"
    write_deltalake(src_table, _t([1, 2]))
    write_deltalake(src_table, _t([3]), mode="append")
    frame = inc.read_stream.delta(src_table).filter("id <> 2")
    _run_query(frame, s3_bucket, pg_url, "delta", dst_table)
    write_deltalake(src_table, _t([4]), mode="append")
    _run_query(inc.read_stream.delta(src_table).filter("id <> 2"), s3_bucket, pg_url, "delta", dst_table)
    assert sorted(DeltaTable(dst_table).to_pyarrow_table().column("id").to_pylist()) == [1, 3, 4]


def test_delta_source_schema_with_only_the_query_storage_options(s3_bucket, pg_url, tmp_path, monkeypatch,
                                                                no_aws_env):
    monkeypatch.setenv("INCREMENTS_LOCAL_DIR", str(tmp_path / "local"))
    from deltalake import write_deltalake
    write_deltalake(f"{s3_bucket}/lake/p", _t([1]), storage_options=no_aws_env)
    _run_query(inc.read_stream.delta(f"{s3_bucket}/lake/p"), s3_bucket, pg_url, "parquet", f"{s3_bucket}/o",
               no_aws_env)
    assert read_parquet_sink(f"{s3_bucket}/o", no_aws_env).column("id").to_pylist() == [1]


def test_parquet_attempt_that_loses_the_manifest_race_removes_its_own_object(s3_bucket, monkeypatch):
    """Two runners of batch 0 both found no manifest; the one that writes it second keeps nothing."""
    out = f"{s3_bucket}/race"
    winner, loser = ParquetSink(out), ParquetSink(out)
    winner.open(_ctx(s3_bucket))
    loser.open(_ctx(s3_bucket))
    monkeypatch.setattr(loser.loc, "exists", lambda name: False)   # its check ran before the winner published
    assert winner.add_batch(0, _t([1])).num_output_rows == 1
    published = storage.location(out).read_bytes("_manifest/0.q-1.json")
    assert loser.add_batch(0, _t([1])).skipped_replay
    assert storage.location(out).read_bytes("_manifest/0.q-1.json") == published
    assert len([o for o in storage.location(out).list("") if o.name.startswith("batch_id=0/")]) == 1
    assert read_parquet_sink(out).column("id").to_pylist() == [1]


def test_concurrent_delta_writers_on_s3_lose_no_commit(s3_bucket):
    """delta-rs commits to S3 with conditional puts: three sinks (three queries) appending to one
    table at once, without a lock table, all land -- none overwrites another's log entry."""
    from concurrent.futures import ThreadPoolExecutor

    from deltalake import DeltaTable
    table = f"{s3_bucket}/lake/shared"
    first = DeltaSink(table, {})
    first.open(_ctx(s3_bucket, qid="q-create"))
    first.add_batch(0, _t([-1]))                      # the table exists before the race

    def writer(k):
        sink = DeltaSink(table, {})
        sink.open(_ctx(s3_bucket, qid=f"q-{k}"))
        for b in range(5):
            sink.add_batch(b, _t([k * 100 + b]))
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(writer, range(3)))
    dt = DeltaTable(table)
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == sorted([-1] + [k * 100 + b for k in range(3)
                                                                                  for b in range(5)])
    assert dt.version() == 15 and all(dt.transaction_version(f"q-{k}") == 4 for k in range(3))

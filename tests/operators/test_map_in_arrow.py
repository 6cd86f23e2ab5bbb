"""frame.map_in_arrow(fn, schema) and frame.map_in_pandas(fn, schema) through the public API: per
batch, fn over an iterator of the batch's record batches (DataFrames), stateless, before a
stateful operator; output conformed to the schema; errors naming the function and the batch.
Parity with Spark 4.3 on recorded cases: test_udf_spark_parity.py."""
from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import increments as inc
from increments import functions as F
from increments.errors import StreamingQueryException
from increments.udf import PythonUdfError
from jsonl_testutil import write_files

SCHEMA = "k STRING, v BIGINT, ts TIMESTAMP"


def _src(tmp_path, batches):
    return inc.read_stream.files(write_files(str(tmp_path / "in"), batches), "json", SCHEMA, max_files_per_trigger=1)


def _start(frame, tmp_path, mode="append"):
    name = "map_" + uuid.uuid4().hex[:8]
    q = (frame.write_stream.format("memory").output_mode(mode).query_name(name).trigger(available_now=True)
         .checkpoint_location(str(tmp_path / name)).start())
    return name, q


def _run(frame, tmp_path, mode="append"):
    name, q = _start(frame, tmp_path, mode)
    q.await_termination()
    return {b: t.to_pylist() for b, t in inc.memory_batches(name).items()}, q


def big_doubled(batches):
    """Keep v >= 2, emit (k, v * 2, ts) in one or more pieces."""
    for b in batches:
        keep = b.filter(pc.greater_equal(b.column("v"), 2))
        yield pa.RecordBatch.from_arrays([keep.column("ts"), pc.multiply(keep.column("v"), 2), keep.column("k")],
                                         names=["ts", "v2", "k"])   # any column order: matched by name


def test_map_in_arrow_batch_by_batch_before_a_windowed_aggregation(tmp_path):
    src = _src(tmp_path, [
        [{"k": "a", "v": 1, "ts": "2024-01-01T10:00:00Z"}, {"k": "a", "v": 2, "ts": "2024-01-01T10:01:00Z"},
         {"k": "b", "v": 3, "ts": "2024-01-01T10:02:00Z"}],
        [{"k": "a", "v": 4, "ts": "2024-01-01T10:16:00Z"}],
        [{"k": "b", "v": 5, "ts": "2024-01-01T10:40:00Z"}],
    ])
    mapped = src.map_in_arrow(big_doubled, "k STRING, v2 INT, ts TIMESTAMP")
    assert mapped.schema == pa.schema([("k", pa.string()), ("v2", pa.int32()), ("ts", pa.timestamp("us", tz="UTC"))])
    out = (mapped.with_watermark("ts", "5 minutes").group_by(F.window("ts", "10 minutes"), "k")
           .agg(F.count(), F.sum("v2")))
    batches, q = _run(out, tmp_path)
    rows = {b: sorted((r["window"]["start"].strftime("%H:%M"), r["k"], r["count"], r["sum(v2)"]) for r in t)
            for b, t in batches.items()}
    # each batch's watermark is the previous batch's max event time - 5 minutes (10:11 in batch 2, 10:35 in 3)
    assert rows == {0: [], 1: [], 2: [("10:00", "a", 1, 4), ("10:00", "b", 1, 6)], 3: [("10:10", "a", 1, 8)]}
    assert [p["num_input_rows"] for p in q.recent_progress] == [3, 1, 1, 0]


def test_map_in_pandas_stateless_and_positional_columns(tmp_path):
    src = _src(tmp_path, [[{"k": "a", "v": 1, "ts": "2024-01-01T10:00:00Z"}, {"k": "b", "v": 2, "ts": "2024-01-01T10:00:00Z"}],
                          [{"k": "c", "v": 3, "ts": "2024-01-01T10:00:00Z"}]])

    def upper(frames):
        for df in frames:
            yield df.assign(k=df["k"].str.upper(), v=df["v"] + 0.5)[["k", "v"]]

    def positional(frames):
        import pandas as pd
        for df in frames:
            yield pd.DataFrame({0: df["v"] * 10, 1: df["k"]})     # non-string labels: by position
    b1, _ = _run(src.map_in_pandas(upper, "k STRING, v DOUBLE"), tmp_path)
    assert b1 == {0: [{"k": "A", "v": 1.5}, {"k": "B", "v": 2.5}], 1: [{"k": "C", "v": 3.5}]}
    b2, _ = _run(src.map_in_pandas(positional, "n BIGINT, key STRING").filter("n > 10"), tmp_path)
    assert b2 == {0: [{"n": 20, "key": "b"}], 1: [{"n": 30, "key": "c"}]}


def test_record_batches_of_at_most_10000_rows_in_order(tmp_path):
    rows = [{"k": str(i), "v": i, "ts": "2024-01-01T10:00:00Z"} for i in range(25_000)]
    src = _src(tmp_path, [rows])
    seen = []

    def sizes(batches):
        for b in batches:
            seen.append(b.num_rows)
            yield pa.RecordBatch.from_arrays([b.column("v")], names=["v"])
    batches, _ = _run(src.map_in_arrow(sizes, "v BIGINT"), tmp_path)
    assert seen == [10_000, 10_000, 5_000]
    assert [r["v"] for r in batches[0]] == list(range(25_000))


def test_an_error_in_the_function_names_it_the_batch_and_the_input(tmp_path):
    src = _src(tmp_path, [[{"k": "a", "v": 1, "ts": "2024-01-01T10:00:00Z"}], [{"k": "bad", "v": 2, "ts": "2024-01-01T10:00:00Z"}]])

    def explode_on_bad(batches):
        for b in batches:
            if "bad" in b.column("k").to_pylist():
                raise ValueError("bad key")
            yield b

    name, q = _start(src.map_in_arrow(explode_on_bad, SCHEMA), tmp_path)
    with pytest.raises(StreamingQueryException) as ei:
        q.await_termination()
    msg = str(ei.value)
    assert "batch 1" in msg and "map_in_arrow function test_map_in_arrow." in msg and "explode_on_bad" in msg
    assert "raised ValueError: bad key while at input record batch 0 (rows 0..0 of the batch; its first row " in msg
    assert "'k': 'bad'" in msg
    assert isinstance(ei.value.cause, PythonUdfError) and ei.value.cause.batch_id == 1
    assert inc.memory_batches(name).keys() == {0}


def test_output_that_does_not_fit_the_schema_fails_the_batch(tmp_path):
    src = _src(tmp_path, [[{"k": "a", "v": 1, "ts": "2024-01-01T10:00:00Z"}]])
    _, q = _start(src.map_in_arrow(lambda it: (b.select(["k"]) for b in it), "k STRING, n BIGINT"), tmp_path)
    with pytest.raises(StreamingQueryException, match=r"output 0 yielded columns \['k'\]: missing \['n'\]"):
        q.await_termination()
    _, q = _start(src.map_in_arrow(lambda it: (b.select(["k"]) for b in it), "k BIGINT"), tmp_path)
    with pytest.raises(StreamingQueryException, match="yielded column 'k' of type string, which does not convert"):
        q.await_termination()
    with pytest.raises(TypeError, match="not callable"):
        src.map_in_arrow("nope", "k STRING")

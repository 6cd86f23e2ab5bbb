"""union / union_by_name of streams and F.window_time spelled through select / with_column.

Batch-by-batch parity with Spark for unions and chains is in test_chain_spark_parity.py; these are
the shapes and refusals around it."""
from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

import increments as inc
from increments import functions as F
from increments.api.frame import StreamFrame
from increments.api.reader import as_static_node
from increments.errors import AnalysisException
from jsonl_testutil import write_files

from chain_spark_expected import EXPECTED
from chain_testutil import norm, sources


def _files(tmp_path, name, schema, batches):
    d = write_files(str(tmp_path / name), batches)
    return inc.read_stream.files(d, "json", schema, max_files_per_trigger=1)


def _run(frame, tmp_path, mode="append"):
    name = "u_" + uuid.uuid4().hex[:8]
    q = (frame.write_stream.format("memory").output_mode(mode).query_name(name).trigger(available_now=True)
         .checkpoint_location(str(tmp_path / name)).start())
    q.await_termination()
    return {b: t for b, t in inc.memory_batches(name).items()}, q.recent_progress


def test_stateless_union_by_position_takes_the_left_names_and_widens_types(tmp_path):
    a = _files(tmp_path, "a", "id INT, name STRING", [[{"id": 1, "name": "x"}], [{"id": 2, "name": "y"}]])
    b = _files(tmp_path, "b", "key BIGINT, label STRING", [[{"key": 10, "label": "p"}], []])
    batches, progress = _run(a.union(b), tmp_path)
    assert batches[0].schema.names == ["id", "name"]
    assert batches[0].schema.field("id").type == pa.int64()
    assert sorted(batches[0].to_pylist(), key=str) == [{"id": 1, "name": "x"}, {"id": 10, "name": "p"}]
    assert batches[1].to_pylist() == [{"id": 2, "name": "y"}]
    assert [p["num_input_rows"] for p in progress] == [2, 1]


def test_union_by_name_matches_names_and_fills_missing_columns(tmp_path):
    a = _files(tmp_path, "a", "k STRING, v BIGINT", [[{"k": "x", "v": 1}]])
    b = _files(tmp_path, "b", "w DOUBLE, k STRING", [[{"k": "y", "w": 2.5}]])
    batches, _ = _run(a.union_by_name(b, allow_missing_columns=True), tmp_path)
    assert batches[0].schema.names == ["k", "v", "w"]
    assert sorted(batches[0].to_pylist(), key=str) == [{"k": "x", "v": 1, "w": None}, {"k": "y", "v": None, "w": 2.5}]


def test_union_refusals(tmp_path):
    a = _files(tmp_path, "a", "k STRING, v BIGINT", [[{"k": "x", "v": 1}]])
    b = _files(tmp_path, "b", "k STRING", [[{"k": "y"}]])
    with pytest.raises(AnalysisException, match="same number of columns"):
        _run(a.union(b), tmp_path)
    with pytest.raises(AnalysisException, match="allow_missing_columns=True"):
        _run(a.union_by_name(b), tmp_path)
    with pytest.raises(AnalysisException, match="both sides must be streams"):
        _run(a.union(StreamFrame(as_static_node(pa.table({"k": ["z"], "v": [1]})))), tmp_path)
    with pytest.raises(TypeError):
        a.union(pa.table({"k": ["z"]}))


@pytest.mark.parametrize("spelling", ["with_column", "select"])
def test_window_time_through_a_named_column_is_the_same_as_spark(tmp_path, spelling):
    """window_of_windows (recorded on Spark) with window_time first named in with_column / select."""
    src = sources(tmp_path, "window_of_windows")
    w1 = src["a"].group_by(F.window("ts", "10 minutes"), "k").count()
    if spelling == "with_column":
        w1 = w1.with_column("wt", F.window_time("window"))
    else:
        w1 = w1.select(f"{F.window_time('window')} AS wt", "count")
    out = w1.group_by(F.window("wt", "30 minutes")).agg(F.sum("count").alias("total"), F.count().alias("n"))
    batches, progress = _run(out, tmp_path)
    exp = EXPECTED["window_of_windows"]
    got = {b: sorted((tuple(norm(v) for v in r.values()) for r in t.to_pylist()), key=repr) for b, t in batches.items()}
    assert got == {b: list(r) for b, r in exp["batches"].items()}
    assert [p["event_time"]["watermark"] for p in progress] == exp["watermarks"]


def test_a_window_time_without_watermark_is_refused_in_append_mode(tmp_path):
    a = _files(tmp_path, "a", "k STRING, ts TIMESTAMP", [[{"k": "x", "ts": "2024-01-01T10:00:00Z"}]])
    w1 = a.group_by(F.window("ts", "10 minutes")).count()   # no watermark: update mode only
    with pytest.raises(AnalysisException):
        _run(w1.group_by(F.window(F.window_time("window"), "1 hour")).count(), tmp_path)

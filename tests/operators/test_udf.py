"""F.udf (row at a time), F.pandas_udf and F.arrow_udf (vectorized) through the public API: in
select, filter, with_column and group_by keys of streaming queries over file sources, batch by
batch; errors raised by user code; the UDFs named in the plan, the checkpoint conf and
`increments check`. Parity with Spark 4.3 on recorded cases: test_udf_spark_parity.py."""
from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import increments as inc
from increments import functions as F
from increments.errors import AnalysisException, StreamingQueryException
from increments.lifecycle.check import check
from increments.udf import PythonUdfError
from jsonl_testutil import write_files

SCHEMA = "k STRING, v BIGINT, ts TIMESTAMP"


def _src(tmp_path, batches, name="in"):
    return inc.read_stream.files(write_files(str(tmp_path / name), batches), "json", SCHEMA, max_files_per_trigger=1)


def _writer(frame, tmp_path, mode="append", name=None):
    name = name or "udf_" + uuid.uuid4().hex[:8]
    return (frame.write_stream.format("memory").output_mode(mode).query_name(name).trigger(available_now=True)
            .checkpoint_location(str(tmp_path / ("chk_" + name))))


def _run(frame, tmp_path, mode="append", name=None):
    w = _writer(frame, tmp_path, mode, name)
    q = w.start()
    q.await_termination()
    return {b: t.to_pylist() for b, t in inc.memory_batches(w.settings.query_name).items()}, q


def norm_key(s):
    return None if s is None else s.strip().lower()


@F.pandas_udf("double")
def tenth(v):
    return v / 10


@F.arrow_udf("bigint")
def doubled(v):
    return pc.multiply(v, 2)


@F.udf(returnType="boolean")
def is_even(v):
    return v % 2 == 0


def test_udfs_in_select_filter_and_with_column_batch_by_batch(tmp_path):
    src = _src(tmp_path, [[{"k": " A", "v": 1, "ts": "2024-01-01T10:00:00Z"}, {"k": "b ", "v": 2, "ts": "2024-01-01T10:01:00Z"}],
                          [{"k": None, "v": 4, "ts": "2024-01-01T10:02:00Z"}, {"k": "C", "v": 5, "ts": "2024-01-01T10:03:00Z"}]])
    norm = F.udf(norm_key, "string")
    out = (src.select("v", norm("k").alias("key"), tenth("v"))
           .filter(is_even("v") | (doubled("v") > 9))
           .with_column("d", doubled(doubled("v"))))
    assert out.schema.names == ["v", "key", "tenth(v)", "d"]
    assert out.schema.field("tenth(v)").type == pa.float64() and out.schema.field("d").type == pa.int64()
    batches, q = _run(out, tmp_path)
    assert batches == {0: [{"v": 2, "key": "b", "tenth(v)": 0.2, "d": 8}],
                       1: [{"v": 4, "key": None, "tenth(v)": 0.4, "d": 16}, {"v": 5, "key": "c", "tenth(v)": 0.5, "d": 20}]}
    assert [p["num_input_rows"] for p in q.recent_progress] == [2, 2]


def test_udf_in_sql_text_and_nested_calls(tmp_path):
    src = _src(tmp_path, [[{"k": "x", "v": 3, "ts": "2024-01-01T10:00:00Z"}, {"k": "y", "v": 6, "ts": "2024-01-01T10:00:00Z"}]])
    norm = F.udf(norm_key)   # the return type defaults to STRING, as in PySpark
    out = (src.filter(f"{doubled('v')} > 10 AND k = 'y'")
           .select("*", norm(F.udf(lambda s: s.upper() + " ")("k")), doubled(F.col("v")), doubled("v + 1")))
    batches, _ = _run(out, tmp_path)
    assert batches == {0: [{"k": "y", "v": 6, "ts": batches[0][0]["ts"], "norm_key(<lambda>(k))": "y", "doubled(v)": 12,
                            "doubled(v + 1)": 14}]}


def test_udf_group_by_key_before_a_windowed_aggregation(tmp_path):
    """A UDF key named as Spark names it (fn(arg)); the window closes with the watermark (append)."""
    src = _src(tmp_path, [
        [{"k": "A ", "v": 1, "ts": "2024-01-01T10:00:00Z"}, {"k": "a", "v": 2, "ts": "2024-01-01T10:04:00Z"},
         {"k": "b", "v": 3, "ts": "2024-01-01T10:05:00Z"}],
        [{"k": " B", "v": 4, "ts": "2024-01-01T10:12:00Z"}],
        [{"k": "a", "v": 5, "ts": "2024-01-01T10:31:00Z"}],
    ])
    norm = F.udf(norm_key, "string")
    out = (src.with_watermark("ts", "5 minutes").with_column("t", tenth("v"))
           .group_by(F.window("ts", "10 minutes"), norm("k")).agg(F.count(), F.sum("t")))
    batches, q = _run(out, tmp_path)
    rows = {b: sorted((r["window"]["start"].strftime("%H:%M"), r["norm_key(k)"], r["count"], round(r["sum(t)"], 6))
                      for r in t) for b, t in batches.items()}
    # watermarks: 0, 10:00, 10:07, then 10:26 in the trailing no-data batch, which closes both windows
    assert rows == {0: [], 1: [], 2: [], 3: [("10:00", "a", 2, 0.3), ("10:00", "b", 1, 0.3), ("10:10", "b", 1, 0.4)]}
    assert q.recent_progress[0]["state_operators"][0]["num_rows_total"] == 2


def test_a_failing_udf_names_the_function_batch_and_row(tmp_path):
    src = _src(tmp_path, [[{"k": "1", "v": 1, "ts": "2024-01-01T10:00:00Z"}],
                          [{"k": "2", "v": 2, "ts": "2024-01-01T10:00:00Z"}, {"k": "oops", "v": 3, "ts": "2024-01-01T10:00:00Z"}]])

    def parse_int(s):
        return int(s)
    name = "udf_err_" + uuid.uuid4().hex[:6]
    w = _writer(src.select(F.udf(parse_int, "bigint")("k").alias("n")), tmp_path, name=name)
    q = w.start()
    with pytest.raises(StreamingQueryException) as ei:
        q.await_termination()
    msg = str(ei.value)
    assert "test_udf.test_a_failing_udf_names_the_function_batch_and_row.<locals>.parse_int" in msg
    assert "batch 1" in msg and "row 1 of the batch, input ('oops')" in msg
    assert "ValueError: invalid literal for int()" in msg and "duckdb" not in msg.lower()
    cause = ei.value.cause
    assert isinstance(cause, PythonUdfError) and cause.batch_id == 1 and cause.row == 1 and cause.input == ["oops"]
    assert inc.memory_batches(name).keys() == {0}       # batch 1 was not committed


def test_a_failing_vectorized_udf_is_located_row_by_row(tmp_path):
    src = _src(tmp_path, [[{"k": "a", "v": 1, "ts": "2024-01-01T10:00:00Z"}, {"k": "b", "v": 0, "ts": "2024-01-01T10:00:00Z"}]])

    @F.pandas_udf("double")
    def inverse(v):
        if (v == 0).any():
            raise ZeroDivisionError("no inverse of 0")
        return 1 / v
    q = _writer(src.with_column("i", inverse("v")), tmp_path).start()
    with pytest.raises(StreamingQueryException, match=r"pandas UDF .*inverse \(called as inverse\(v\)\) raised on row 1 "
                                                      r"of the batch, input \(0\): ZeroDivisionError: no inverse of 0"):
        q.await_termination()


def test_wrong_results_fail_the_batch_naming_the_value(tmp_path):
    src = _src(tmp_path, [[{"k": "a", "v": 1, "ts": "2024-01-01T10:00:00Z"}, {"k": "b", "v": 2, "ts": "2024-01-01T10:00:00Z"}]])
    q = _writer(src.select(F.udf(lambda v: "x" if v == 2 else v, "bigint")("v")), tmp_path).start()
    with pytest.raises(StreamingQueryException, match=r"returned 'x', which is not a int64 on row 1 of the batch, "
                                                      r"input \(2\)"):
        q.await_termination()
    q = _writer(src.select(F.pandas_udf(lambda v: v.astype(object).where(v == 1, "two"), "bigint")("v")), tmp_path).start()
    with pytest.raises(StreamingQueryException, match=r"returned 'two', which is not a int64, on row 1 of the batch, "
                                                      r"input \(2\)"):
        q.await_termination()
    q = _writer(src.select(F.arrow_udf(lambda v: v.slice(0, 1), "bigint")("v")), tmp_path).start()
    with pytest.raises(StreamingQueryException, match="returned 1 values for 2 rows"):
        q.await_termination()


def test_refusals_before_any_batch(tmp_path):
    src = _src(tmp_path, [[{"k": "a", "v": 1, "ts": "2024-01-01T10:00:00Z"}]])
    with pytest.raises(TypeError, match="return type is required"):
        F.pandas_udf(lambda v: v)
    with pytest.raises(TypeError, match="unknown type"):
        F.udf(lambda v: v, "strang")
    with pytest.raises(AnalysisException):          # a STRING result is no filter condition
        src.filter(F.udf(norm_key)("k"))
    with pytest.raises(TypeError, match="Python bool"):
        bool(doubled("v") > 1)
    with pytest.raises(TypeError, match="a UDF call in an expectation's condition is not supported: compute it first"):
        src.expect("even", f"{is_even('v')}")
    with pytest.raises(TypeError, match="a UDF call in a join condition is not supported"):
        src.join(pa.table({"x": [1]}), f"{doubled('v')} = x")


def test_the_plan_and_increments_check_name_the_udf(tmp_path):
    src = _src(tmp_path, [[{"k": "a", "v": 1, "ts": "2024-01-01T10:00:00Z"}]])

    def build(fn):
        return _writer(src.with_watermark("ts", "1 minute").group_by(F.window("ts", "1 minute"), F.udf(fn)("k"))
                       .count(), tmp_path, name="named")

    def key_v1(s):
        return s.upper()

    def key_v2(s):
        return s.lower()
    w = build(key_v1)
    assert "row udf test_udf.test_the_plan_and_increments_check_name_the_udf.<locals>.key_v1 -> VARCHAR" in \
        w.frame.explain()
    w.start().await_termination()
    report = check(build(key_v1))
    assert report.safe and "Python functions changed" not in report.text(), report.text()
    key_v2.__name__, key_v2.__qualname__ = key_v1.__name__, key_v1.__qualname__   # same name, other body
    report = check(build(key_v2))
    assert report.safe, report.text()
    assert "Python functions changed since the last start" in report.text() and "key_v1 -> VARCHAR [code" in report.text()
    build(key_v2).start().await_termination()           # allowed: a stateless step (recorded for the next check)
    assert "Python functions changed" not in check(build(key_v2)).text()


def _second_watermark(tmp_path, make):
    src = _src(tmp_path, [[{"k": "a", "v": 1, "ts": "2024-01-01T10:00:00Z"}, {"k": "drop", "v": 2, "ts": "2024-01-01T10:30:00Z"},
                           {"k": "c", "v": 3, "ts": "2024-01-01T10:25:00Z"}],
                          [{"k": "d", "v": 4, "ts": "2024-01-01T10:26:00Z"}]])
    out = make(src.with_watermark("ts", "5 minutes")).group_by(F.window("ts", "10 minutes")).count()
    _, q = _run(out, tmp_path)
    return q.recent_progress[1]["event_time"]["watermark"]


def test_a_udf_filter_is_split_around_the_watermark_as_spark_splits_it(tmp_path):
    """Conjuncts whose UDFs do not read the event time go below with_watermark (Spark's pushdown,
    recorded in test_udf_spark_parity.py): the rows they drop never feed the watermark; a UDF of the
    event time, and a conjunct on it, stay above."""
    keep = F.udf(lambda s: s != "drop", "boolean")
    minute_not_30 = F.udf(lambda t: t.minute != 30, "boolean")
    # all below: max event time of a, c = 10:25
    assert _second_watermark(tmp_path / "1", lambda f: f.filter(keep("k"))) == "2024-01-01T10:20:00.000Z"
    # the UDF reads ts: above, the dropped 10:30 row feeds the watermark
    assert _second_watermark(tmp_path / "2", lambda f: f.filter(minute_not_30("ts"))) == "2024-01-01T10:25:00.000Z"
    # split: keep(k) below, the ts conjunct above (10:25 still feeds it)
    cond = f"{keep('k')} AND ts < TIMESTAMPTZ '2024-01-01 10:20:00+00'"
    assert _second_watermark(tmp_path / "3", lambda f: f.filter(cond)) == "2024-01-01T10:20:00.000Z"
    # nested: a UDF over a UDF of ts stays above
    nested = F.udf(lambda b: b, "boolean")(minute_not_30("ts"))
    assert _second_watermark(tmp_path / "4", lambda f: f.filter(nested)) == "2024-01-01T10:25:00.000Z"
    # a nondeterministic UDF stays above (Spark pushes deterministic predicates only)
    random_keep = F.udf(lambda s: s != "drop", "boolean").as_nondeterministic()
    assert _second_watermark(tmp_path / "5", lambda f: f.filter(random_keep("k"))) == "2024-01-01T10:25:00.000Z"


def test_udfs_on_qualified_columns_after_a_stream_static_join(tmp_path):
    src = _src(tmp_path, [[{"k": "a", "v": 1, "ts": "2024-01-01T10:00:00Z"}, {"k": "b", "v": 2, "ts": "2024-01-01T10:00:00Z"}]])
    names = pa.table({"id": ["a", "b"], "name": ["alpha", "beta"]})
    up = F.udf(lambda s: s.upper(), "string")
    out = (src.alias("i").join(names, "i.k = id").filter(up("i.k") == "B")
           .select("i.k", up("name"), up("i.k").alias("K")))
    batches, _ = _run(out, tmp_path)
    assert batches == {0: [{"k": "b", "<lambda>(name)": "BETA", "K": "B"}]}

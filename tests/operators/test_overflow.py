"""Integer overflow raises, as in Spark 4 (ANSI mode, its default: ARITHMETIC_OVERFLOW; recorded on
Spark 4.3 by docs/spark/record_overflow.py: sum of two BIGINT 9223372036854775807 raises, their avg
is 9.223372036854776e+18, sum of two INT 2147483647 is the BIGINT 4294967294, `x + 1` at BIGINT's
limit raises). A sum never wraps around:
within a batch (Arrow's fast path checks its bound, DuckDB sums exactly), across batches (the merge
with the state), in a session window; the error names the query, batch, operator, aggregate and
column, and the batch is not committed. An expression's overflow names the column (or filter)."""
from __future__ import annotations

import json
import os

import pytest

import increments as inc
from increments import functions as F
from increments.checkpoint.log import open_log

MAX, MIN = 2 ** 63 - 1, -(2 ** 63)


def _run(tmp_path, files, build, schema="k STRING, x BIGINT, ts TIMESTAMP", mode="update", name="q"):
    d = tmp_path / ("in_" + name)
    d.mkdir()
    for i, rows in enumerate(files):
        (d / f"part-{i:04d}.json").write_text("".join(json.dumps({"ts": "2024-01-01T10:00:00Z", **r}) + "\n"
                                                      for r in rows))
    frame = build(inc.read_stream.files(str(d), "json", schema, max_files_per_trigger=1))
    chk = str(tmp_path / ("chk_" + name))
    q = (frame.write_stream.format("memory").query_name("ovf_" + name).output_mode(mode).trigger(available_now=True)
         .checkpoint_location(chk).option("state_store", "memory").start())
    q.await_termination()
    return {b: t.to_pylist() for b, t in inc.memory_batches("ovf_" + name).items()}


def _fails(tmp_path, files, build, name, **kw) -> inc.ArithmeticOverflowError:
    with pytest.raises(inc.StreamingQueryException) as e:
        _run(tmp_path, files, build, name=name, **kw)
    err = e.value.cause
    assert isinstance(err, inc.ArithmeticOverflowError), repr(err)
    return err


def _committed(tmp_path, name) -> list[int]:
    chk = str(tmp_path / ("chk_" + name))
    log = open_log(None, chk, json.load(open(os.path.join(chk, "metadata.json")))["id"])
    return [b for b in range(5) if log.get_commit(b) is not None]


def by_key(f):
    return f.group_by("k").agg(F.sum("x"), F.count())


def test_sum_overflow_in_one_batch_raises_naming_column_batch_and_operator(tmp_path):
    err = _fails(tmp_path, [[{"k": "a", "x": 1}], [{"k": "a", "x": MAX}, {"k": "a", "x": MAX}]], by_key, "one")
    msg = str(err)
    assert "query 'ovf_one', batch 1" in msg and "operator 0:stateStoreSave" in msg
    assert "sum('x') AS 'sum(x)'" in msg and "BIGINT overflow" in msg and "ARITHMETIC_OVERFLOW" in msg
    assert _committed(tmp_path, "one") == [0]


def test_sum_overflow_across_batches_and_below_min(tmp_path):
    err = _fails(tmp_path, [[{"k": "a", "x": MAX}], [{"k": "b", "x": 5}], [{"k": "a", "x": 1}]], by_key, "merge")
    assert "batch 2" in str(err) and "sum('x')" in str(err)
    assert _committed(tmp_path, "merge") == [0, 1]
    err = _fails(tmp_path, [[{"k": "a", "x": MIN}, {"k": "a", "x": -1}]], by_key, "neg")
    assert "batch 0" in str(err)


def test_sums_at_the_limit_do_not_fail_and_avg_is_a_double(tmp_path):
    got = _run(tmp_path, [[{"k": "a", "x": MAX}, {"k": "a", "x": -1}, {"k": "a", "x": 1}],
                          [{"k": "a", "x": MIN + 1}, {"k": "a", "x": -1}]],
               lambda f: f.group_by("k").agg(F.sum("x"), F.avg("x").alias("a")), name="limit")
    assert got[0] == [{"k": "a", "sum(x)": MAX, "a": MAX / 3}]
    assert got[1][0]["sum(x)"] == -1
    got = _run(tmp_path, [[{"k": "a", "x": MAX}], [{"k": "a", "x": MAX}]],
               lambda f: f.group_by("k").agg(F.avg("x")), name="avg")
    assert got[1] == [{"k": "a", "avg(x)": 9.223372036854776e+18}]    # Spark 4.3's value


def test_sum_of_int_is_a_bigint(tmp_path):
    got = _run(tmp_path, [[{"k": "a", "x": 2147483647}, {"k": "a", "x": 2147483647}]],
               lambda f: f.group_by("k").agg(F.sum("x")), schema="k STRING, x INT, ts TIMESTAMP", name="int")
    assert got[0] == [{"k": "a", "sum(x)": 4294967294}]


def test_windowed_and_session_sums_overflow(tmp_path):
    err = _fails(tmp_path, [[{"k": "a", "x": MAX}], [{"k": "a", "x": MAX}]],
                 lambda f: f.with_watermark("ts", "10 minutes").group_by(F.window("ts", "10 minutes"))
                 .agg(F.sum("x").alias("total")), "win")
    assert "batch 1" in str(err) and "sum('x') AS 'total'" in str(err)
    err = _fails(tmp_path, [[{"k": "a", "x": MAX}, {"k": "a", "x": 1}]],
                 lambda f: f.with_watermark("ts", "10 minutes").group_by(F.session_window("ts", "5 minutes"), "k")
                 .agg(F.sum("x")), "sess_one", mode="append")
    assert "batch 0" in str(err) and "session_window" in str(err)
    err = _fails(tmp_path, [[{"k": "a", "x": MAX}], [{"k": "a", "x": 1}]],
                 lambda f: f.with_watermark("ts", "10 minutes").group_by(F.session_window("ts", "5 minutes"), "k")
                 .agg(F.sum("x")), "sess_merge", mode="append")
    assert "batch 1" in str(err) and "sum('x')" in str(err)


def test_expression_overflow_names_the_column_or_filter(tmp_path):
    err = _fails(tmp_path, [[{"k": "a", "x": 1}], [{"k": "a", "x": MAX}]],
                 lambda f: f.filter("x > 0").with_column("y", "x + 1").select("k", "y * 2 AS z"), "expr")
    msg = str(err)
    assert "batch 1" in msg and "column 'y'" in msg and "Overflow in addition of INT64" in msg
    err = _fails(tmp_path, [[{"k": "a", "x": MAX}]], lambda f: f.select("k", "x", "x * 2 AS doubled"), "sel")
    assert "column 'doubled'" in str(err) and "batch 0" in str(err)
    err = _fails(tmp_path, [[{"k": "a", "x": MAX}]], lambda f: f.filter("x + x > 0"), "filt")
    assert "filter condition" in str(err)


def test_cast_out_of_range_raises_naming_the_column(tmp_path):
    """Spark 4 ANSI: CAST_OVERFLOW; DuckDB's Conversion Error ... out of range, named the same way."""
    err = _fails(tmp_path, [[{"k": "a", "x": 2 ** 40}]], lambda f: f.select("k", "CAST(x AS INTEGER) AS i"), "cast")
    assert "column 'i'" in str(err) and "batch 0" in str(err) and "out of range" in str(err)

"""A division or remainder by zero raises, as in Spark 4 (ANSI mode, its default), instead of
giving Infinity/NaN (DuckDB's IEEE default). Recorded on Spark 4.3.0 by docs/spark/record_divide.py
(local[2], JSON file source, foreachBatch):
    int_div_literal_zero     error DIVIDE_BY_ZERO (hint try_divide)        x / 0, x INT
    int_div_column_zero      error DIVIDE_BY_ZERO (hint try_divide)        x / y, y = 0
    col_div_zero_pyspark     error DIVIDE_BY_ZERO (hint try_divide)        F.col("x") / 0
    double_div_zero          error DIVIDE_BY_ZERO (hint try_divide)        d / 0, d DOUBLE
    zero_double_div_zero     error DIVIDE_BY_ZERO (hint try_divide)        0.0 / 0.0D
    decimal_div_zero         error DIVIDE_BY_ZERO (hint try_divide)        m / 0, m DECIMAL(10,2)
    int_mod_zero             error REMAINDER_BY_ZERO (hint try_mod)        x % 0
    double_mod_zero          error REMAINDER_BY_ZERO (hint try_mod)        d % 0
    decimal_mod_zero         error REMAINDER_BY_ZERO (hint try_mod)        m % 0
    null_div_zero            {0: [('a', None)]}                            NULL / 0
    null_mod_zero            {0: [('a', None)]}                            NULL % 0
    div_null_divisor         {0: [('a', None)]}                            x / NULL
    try_divide_zero          {0: [('a', None)]}  (r:double)                try_divide(x, 0)
    try_mod_zero             {0: [('a', None)]}  (r:int)                   try_mod(x, 0)
    filter_div_zero          error DIVIDE_BY_ZERO (hint try_divide)        filter("x / y > 1")
    second_batch_div_zero    error DIVIDE_BY_ZERO, batch 0 delivered       batch 1 divides by 0
    int_div_nonzero          {0: [('a', 3.5, 1)]}  (r:double, q:int)       7 / 2, 7 % 2
    sum_of_div_zero          error DIVIDE_BY_ZERO (hint try_divide)        sum(x / y)
The error names the query, batch, stage and column (or filter) and Spark's error class and
function to use instead; the batch is not committed. Functions DuckDB's IEEE mode keeps (sqrt of a
negative number: NaN, as Spark) are unchanged."""
from __future__ import annotations

import json
import math
import os

import pytest

import increments as inc
from increments import functions as F
from increments.checkpoint.log import open_log

SCHEMA = "k STRING, x INT, y INT, d DOUBLE, m DECIMAL(10,2)"
ROW = {"k": "a", "x": 7, "y": 0, "d": 7.5, "m": "7.25"}


def _run(tmp_path, files, build, name, mode="append"):
    d = tmp_path / ("in_" + name)
    d.mkdir()
    for i, rows in enumerate(files):
        (d / f"part-{i:04d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    frame = build(inc.read_stream.files(str(d), "json", SCHEMA, max_files_per_trigger=1))
    q = (frame.write_stream.format("memory").query_name("dz_" + name).output_mode(mode).trigger(available_now=True)
         .checkpoint_location(str(tmp_path / ("chk_" + name))).option("state_store", "memory").start())
    q.await_termination()
    return {b: t.to_pylist() for b, t in inc.memory_batches("dz_" + name).items()}


def _fails(tmp_path, files, build, name, **kw) -> inc.DivideByZeroError:
    with pytest.raises(inc.StreamingQueryException) as e:
        _run(tmp_path, files, build, name, **kw)
    err = e.value.cause
    assert isinstance(err, inc.DivideByZeroError), repr(err)
    assert isinstance(err, ZeroDivisionError)
    return err


def _committed(tmp_path, name) -> list[int]:
    chk = str(tmp_path / ("chk_" + name))
    with open(os.path.join(chk, "metadata.json")) as f:
        log = open_log(None, chk, json.load(f)["id"])
    return [b for b in range(5) if log.get_commit(b) is not None]


@pytest.mark.parametrize("expr", ["x / 0", "x / y", "d / 0", "d / 0.0", "m / 0", "CAST(0.0 AS DOUBLE) / 0.0"])
def test_division_by_zero_raises_divide_by_zero(tmp_path, expr):
    name = "div_" + "".join(c for c in expr if c.isalnum())
    err = _fails(tmp_path, [[ROW]], lambda f: f.select("k", f"{expr} AS r"), name)
    msg = str(err)
    assert f"query 'dz_{name}', batch 0" in msg and "column 'r'" in msg, msg
    assert "DIVIDE_BY_ZERO" in msg and "try_divide" in msg, msg
    assert _committed(tmp_path, name) == []


@pytest.mark.parametrize("expr", ["x % 0", "x % y", "d % 0", "m % 0"])
def test_remainder_by_zero_raises_remainder_by_zero(tmp_path, expr):
    name = "mod_" + "".join(c for c in expr if c.isalnum())
    err = _fails(tmp_path, [[ROW]], lambda f: f.with_column("r", expr), name)
    assert "column 'r'" in str(err) and "REMAINDER_BY_ZERO" in str(err) and "try_mod" in str(err)


def test_in_a_filter_in_a_later_batch_and_in_an_aggregate(tmp_path):
    err = _fails(tmp_path, [[ROW]], lambda f: f.filter("x / y > 1"), "filt")
    assert "filter condition" in str(err) and "DIVIDE_BY_ZERO" in str(err)
    err = _fails(tmp_path, [[{**ROW, "y": 1}], [ROW]], lambda f: f.select("k", "x / y AS r"), "later")
    assert "batch 1" in str(err) and _committed(tmp_path, "later") == [0]
    err = _fails(tmp_path, [[ROW]], lambda f: f.with_column("q", "x / y").group_by("k").agg(F.sum("q").alias("s")),
                 "agg", mode="update")           # (aggregates take columns: the quotient is one)
    assert "batch 0" in str(err) and "column 'q'" in str(err) and "DIVIDE_BY_ZERO" in str(err)


def test_null_operands_try_functions_and_nonzero_divisors(tmp_path):
    got = _run(tmp_path, [[{**ROW, "x": None}]], lambda f: f.select("k", "x / 0 AS r", "x % 0 AS q"), "nulls")
    assert got == {0: [{"k": "a", "r": None, "q": None}]}
    got = _run(tmp_path, [[{**ROW, "y": None}]], lambda f: f.select("k", "x / y AS r"), "nulldiv")
    assert got == {0: [{"k": "a", "r": None}]}
    got = _run(tmp_path, [[ROW]], lambda f: f.select("k", "try_divide(x, 0) AS r", "try_mod(x, 0) AS q",
                                                     "try_divide(x, 2) AS h", "try_mod(x, 2) AS p"), "try")
    assert got == {0: [{"k": "a", "r": None, "q": None, "h": 3.5, "p": 1}]}
    got = _run(tmp_path, [[{**ROW, "y": 2}]], lambda f: f.select("k", "x / y AS r", "x % y AS q"), "nonzero")
    assert got == {0: [{"k": "a", "r": 3.5, "q": 1}]}


def test_ieee_results_of_other_functions_are_kept(tmp_path):
    """sqrt(-1) is NaN in Spark and in DuckDB's IEEE mode: a stage that also divides keeps it."""
    got = _run(tmp_path, [[{**ROW, "d": -1.0, "y": 2}]], lambda f: f.select("k", "sqrt(d) AS s", "x / y AS r"), "ieee")
    assert math.isnan(got[0][0]["s"]) and got[0][0]["r"] == 3.5


def test_in_an_expectation_the_error_names_it(tmp_path):
    """An expectation's condition is an SQL expression too: x / y with y = 0 fails the batch."""
    err = _fails(tmp_path, [[ROW]], lambda f: f.expect("positive", "x > 0").expect("ratio", "x / y < 2"), "expect")
    assert "expectation 'ratio' (x / y < 2)" in str(err) and "DIVIDE_BY_ZERO" in str(err) and "batch 0" in str(err)

"""Record Apache Spark's behaviour on a division or remainder by zero, the values
tests/operators/test_divide_by_zero.py cites.

Not part of the product or its tests (pyspark is no dependency): run it by hand in a separate venv,
    python3 -m venv /tmp/sparkvenv && /tmp/sparkvenv/bin/pip install pyspark==4.3.0
    TZ=UTC /tmp/sparkvenv/bin/python docs/spark/record_divide.py
local[2], 2 shuffle partitions, ANSI mode (Spark 4's default), a JSON file source with
maxFilesPerTrigger=1, append mode (update for the aggregate), trigger(availableNow=True),
foreachBatch collecting each batch. Prints one line per case: its name and either the batches'
rows or the error class Spark raised.
Recorded on 4.3.0 (2026-12-05); the test's docstring lists the output.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

WRAPPERS = {"STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR"}   # the error classes around the cause
S = "k STRING, x INT, y INT, d DOUBLE, m DECIMAL(10,2)"
ROW = {"k": "a", "x": 7, "y": 0, "d": 7.5, "m": "7.25"}


def sel(*exprs):
    return lambda f: f.selectExpr(*exprs)


CASES = {
    "int_div_literal_zero": ([[ROW]], sel("k", "x / 0 AS r")),
    "int_div_column_zero": ([[ROW]], sel("k", "x / y AS r")),
    "col_div_zero_pyspark": ([[ROW]], lambda f: f.select("k", (F.col("x") / 0).alias("r"))),
    "double_div_zero": ([[ROW]], sel("k", "d / 0 AS r")),
    "double_div_zero_double": ([[ROW]], sel("k", "d / 0.0D AS r")),
    "zero_double_div_zero": ([[{**ROW, "d": 0.0}]], sel("k", "d / 0.0D AS r")),
    "decimal_div_zero": ([[ROW]], sel("k", "m / 0 AS r")),
    "int_mod_zero": ([[ROW]], sel("k", "x % 0 AS r")),
    "int_mod_column_zero": ([[ROW]], sel("k", "x % y AS r")),
    "col_mod_zero_pyspark": ([[ROW]], lambda f: f.select("k", (F.col("x") % 0).alias("r"))),
    "double_mod_zero": ([[ROW]], sel("k", "d % 0 AS r")),
    "decimal_mod_zero": ([[ROW]], sel("k", "m % 0 AS r")),
    "int_div_integral_zero": ([[ROW]], sel("k", "x div 0 AS r")),
    "pmod_zero": ([[ROW]], sel("k", "pmod(x, 0) AS r")),
    "null_div_zero": ([[{**ROW, "x": None}]], sel("k", "x / 0 AS r")),
    "null_mod_zero": ([[{**ROW, "x": None}]], sel("k", "x % 0 AS r")),
    "div_null_divisor": ([[{**ROW, "y": None}]], sel("k", "x / y AS r")),
    "try_divide_zero": ([[ROW]], sel("k", "try_divide(x, 0) AS r")),
    "try_mod_zero": ([[ROW]], sel("k", "try_mod(x, 0) AS r")),
    "filter_div_zero": ([[ROW]], lambda f: f.filter("x / y > 1")),
    "second_batch_div_zero": ([[{**ROW, "y": 1}], [ROW]], sel("k", "x / y AS r")),
    "int_div_nonzero": ([[{**ROW, "y": 2}]], sel("k", "x / y AS r", "x % y AS q")),
    "sum_of_div_zero": ([[ROW]], lambda f: f.groupBy("k").agg(F.sum(F.expr("x / y")).alias("s"))),
}


def run(spark, name, files, build, base):
    d = os.path.join(base, name)
    os.makedirs(d)
    for i, rows in enumerate(files):
        path = os.path.join(d, f"part-{i:04d}.json")
        with open(path, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # Spark takes files in mtime order
    out = {}

    def fe(df, bid):
        out[bid] = [tuple(r) for r in df.collect()]
    q = build(spark.readStream.schema(S).option("maxFilesPerTrigger", 1).json(d))
    mode = "update" if name.startswith("sum_") else "append"
    try:
        sq = (q.writeStream.outputMode(mode).foreachBatch(fe).trigger(availableNow=True)
              .option("checkpointLocation", os.path.join(base, name + "_chk")).start())
        sq.awaitTermination()
    except Exception as e:
        classes = [c for c in re.findall(r"\[([A-Z_]+)(?:\.[A-Z_]+)?\]", str(e)) if c not in WRAPPERS]
        hint = re.search(r"Use `(\w+)`", str(e))
        return (f"error {classes[0] if classes else str(e).splitlines()[0][:200]}"
                + (f" (hint {hint.group(1)}; batches before: {sorted(out)})" if hint or out else ""))
    return f"{out}  ({q.schema.simpleString()})"


def main():
    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    names = sys.argv[1:] or list(CASES)
    with tempfile.TemporaryDirectory() as base:
        for name in names:
            print(f"{name:24s} {run(spark, name, *CASES[name], base)}", flush=True)


if __name__ == "__main__":
    main()

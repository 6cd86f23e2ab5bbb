"""Record Apache Spark's behaviour at integer limits, the values tests/operators/test_overflow.py cites.

Not part of the product or its tests (pyspark is no dependency): run it by hand in a separate venv,
    python3 -m venv /tmp/sparkvenv && /tmp/sparkvenv/bin/pip install pyspark==4.3.0
    TZ=UTC /tmp/sparkvenv/bin/python docs/spark/record_overflow.py
local[2], 2 shuffle partitions, ANSI mode (Spark 4's default), a JSON file source with
maxFilesPerTrigger=1, update mode, trigger(availableNow=True), foreachBatch collecting each batch.
Prints one line per case: its name and either the batches' rows or the error class Spark raised.
Recorded on 4.3.0 (2026-12-02), as tests/operators/test_overflow.py says:
    bigint_sum_overflow         error ARITHMETIC_OVERFLOW
    bigint_sum_at_limit         {0: [('a', 9223372036854775807, 3.0744573456182584e+18)]}  (struct<k:string,sum(x):bigint,a:double>)
    bigint_avg_across_batches   {0: [('a', 9.223372036854776e+18)], 1: [('a', 9.223372036854776e+18)]}  (struct<k:string,avg(x):double>)
    int_sum_is_bigint           {0: [('a', 4294967294)]}  (struct<k:string,sum(x):bigint>)
    bigint_plus_one             error ARITHMETIC_OVERFLOW
    cast_out_of_range           error CAST_OVERFLOW
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

MAX = 9223372036854775807
WRAPPERS = {"STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR"}   # the error classes around the cause
CASES = {
    "bigint_sum_overflow": ("k STRING, x BIGINT", [[MAX, MAX]], lambda f: f.groupBy("k").agg(F.sum("x"))),
    "bigint_sum_at_limit": ("k STRING, x BIGINT", [[MAX, -1, 1]],
                            lambda f: f.groupBy("k").agg(F.sum("x"), F.avg("x").alias("a"))),
    "bigint_avg_across_batches": ("k STRING, x BIGINT", [[MAX], [MAX]], lambda f: f.groupBy("k").agg(F.avg("x"))),
    "int_sum_is_bigint": ("k STRING, x INT", [[2147483647, 2147483647]], lambda f: f.groupBy("k").agg(F.sum("x"))),
    "bigint_plus_one": ("k STRING, x BIGINT", [[MAX]], lambda f: f.select("k", F.expr("x + 1 AS y"))),
    "cast_out_of_range": ("k STRING, x BIGINT", [[2 ** 40]], lambda f: f.select("k", F.expr("CAST(x AS INT) AS i"))),
}


def run(spark, name, schema, files, build, base):
    d = os.path.join(base, name)
    os.makedirs(d)
    for i, xs in enumerate(files):
        path = os.path.join(d, f"part-{i:04d}.json")
        with open(path, "w") as f:
            f.write("".join(json.dumps({"k": "a", "x": x}) + "\n" for x in xs))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # Spark takes files in mtime order
    out = {}

    def fe(df, bid):
        out[bid] = [tuple(r) for r in df.collect()]
    q = build(spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(d))
    try:
        sq = (q.writeStream.outputMode("update").foreachBatch(fe).trigger(availableNow=True)
              .option("checkpointLocation", os.path.join(base, name + "_chk")).start())
        sq.awaitTermination()
    except Exception as e:
        classes = [c for c in re.findall(r"\[([A-Z_]+)(?:\.[A-Z_]+)?\]", str(e)) if c not in WRAPPERS]
        return f"error {classes[0] if classes else str(e).splitlines()[0][:200]}"
    return f"{out}  ({q.schema.simpleString()})"


def main():
    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    names = sys.argv[1:] or list(CASES)
    with tempfile.TemporaryDirectory() as base:
        for name in names:
            print(f"{name:27s} {run(spark, name, *CASES[name], base)}", flush=True)


if __name__ == "__main__":
    main()

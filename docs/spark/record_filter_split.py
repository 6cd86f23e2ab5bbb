"""Record Apache Spark's per-batch results for tests/operators/filter_split_scenarios.py.

Not part of the product or its tests (pyspark is no dependency): run it by hand in a separate venv,
    python3 -m venv /work/sparkvenv && /work/sparkvenv/bin/pip install pyspark==4.3.0
    TZ=UTC /work/sparkvenv/bin/python docs/spark/record_filter_split.py > tests/operators/filter_split_spark_expected.py
local[2], 2 shuffle partitions, a JSON file source with maxFilesPerTrigger=1, trigger(availableNow=True),
foreachBatch collecting each batch; the watermark is each progress's eventTime.watermark.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import pprint
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "operators"))
from filter_split_scenarios import FILES, SCENARIOS, SCHEMA  # noqa: E402

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402


def norm(v):
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    if hasattr(v, "asDict"):
        return tuple(norm(x) for x in v)
    return v


def run(spark, name, sc, base):
    d = os.path.join(base, name, "in")
    os.makedirs(d)
    for i, rows in enumerate(FILES):
        path = os.path.join(d, f"part-{i:04d}.json")
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # Spark takes files in mtime order
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(d).withWatermark("ts", "10 minutes")
    for step in sc.get("before", []):
        df = df.select(*step[1]) if step[0] == "select" else df.withColumn(step[1], F.expr(step[2]))
    for c in sc["filters"]:
        df = df.filter(c)
    q = df.groupBy(F.window("ts", "10 minutes")).count()
    out = {}

    def fe(batch, bid):
        out[bid] = sorted((tuple(norm(v) for v in r) for r in batch.collect()), key=repr)
    sq = (q.writeStream.outputMode(sc.get("output_mode", "append")).foreachBatch(fe)
          .option("checkpointLocation", os.path.join(base, name, "chk")).trigger(availableNow=True).start())
    sq.awaitTermination()
    progress = sq.recentProgress
    return {
        "columns": q.columns,
        "batches": out,
        "watermarks": [p["eventTime"].get("watermark") for p in progress],
        "num_input_rows": [p["numInputRows"] for p in progress],
        "state": [[(o["operatorName"], o["numRowsTotal"], o["numRowsUpdated"], o["numRowsRemoved"],
                    o["numRowsDroppedByWatermark"]) for o in p["stateOperators"]] for p in progress],
    }


def main():
    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(SCENARIOS)
    res = {}
    with tempfile.TemporaryDirectory() as base:
        for name in names:
            res[name] = run(spark, name, SCENARIOS[name], base)
            print(name, "done", file=sys.stderr)
    print('"""Per-batch results of Apache Spark 4.3.0 for tests/operators/filter_split_scenarios.py, recorded by')
    print("docs/spark/record_filter_split.py (local[2], 2 shuffle partitions, maxFilesPerTrigger=1, availableNow,")
    print("foreachBatch). Do not edit by hand. state: per batch, per stateful operator:")
    print('(name, numRowsTotal, numRowsUpdated, numRowsRemoved, numRowsDroppedByWatermark)."""')
    print("EXPECTED = " + pprint.pformat(res, width=110, sort_dicts=False))


if __name__ == "__main__":
    main()

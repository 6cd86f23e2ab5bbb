"""Record Apache Spark's per-batch results for tests/operators/nested_scenarios.py (nested data,
explode / explode_outer / posexplode).

Not part of the product or its tests (pyspark is no dependency): run it by hand in a separate venv,
    python3 -m venv /work/sparkvenv && /work/sparkvenv/bin/pip install pyspark==4.3.0
    TZ=UTC /work/sparkvenv/bin/python docs/spark/record_nested.py > tests/operators/nested_spark_expected.py
local[2], 2 shuffle partitions, file sources with maxFilesPerTrigger=1, trigger(availableNow=True),
foreachBatch collecting each batch. A query Spark refuses, or a batch that fails, is recorded as
"error" (with the batches committed before it).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import pprint
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "operators"))
from nested_scenarios import SCENARIOS  # noqa: E402

from pyspark.sql import Row, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402


def norm(v):
    """A value as the test compares it: timestamps as UTC text, structs as tuples, lists as lists,
    maps as ("map", sorted (key, value) pairs)."""
    if isinstance(v, dt.datetime):
        s = v.strftime("%Y-%m-%d %H:%M:%S")
        return s + (f".{v.microsecond:06d}" if v.microsecond else "")
    if isinstance(v, Row):
        return tuple(norm(x) for x in v)
    if isinstance(v, dict):
        return ("map", tuple(sorted((norm(k), norm(x)) for k, x in v.items())))
    if isinstance(v, list):
        return [norm(x) for x in v]
    return v


def query(name, src):
    a = src["a"]
    W = F.window("ts", "10 minutes")
    if name == "explode_window":
        return a.select("id", "ts", F.explode("tags").alias("tag")).groupBy(W, "tag").count()
    if name == "explode_outer_window":
        return a.select("id", "ts", F.explode_outer("tags").alias("tag")).groupBy(W, "tag").count()
    if name == "posexplode_window_update":
        return a.select("ts", F.posexplode("tags")).groupBy(W, "pos").agg(F.count("*").alias("count"), F.max("col"))
    if name == "explode_dedup":
        return a.select("id", "ts", F.explode("tags").alias("tag")).dropDuplicates(["tag", "ts"])
    if name == "posexplode_stateless":
        return a.select("id", F.posexplode("tags"))
    if name == "posexplode_outer_stateless":
        return a.select("id", F.posexplode_outer("tags"))
    if name == "explode_map_stateless":
        return a.select("ts", F.explode("attrs"))
    if name == "nested_select_filter":
        return a.filter("e.user.country = 'fr'").selectExpr("ts", "e.user.id", "e.*", "tags[0]", "attrs['k']",
                                                          "size(tags) AS n_tags")
    if name == "struct_key_window":
        return a.groupBy(W, "e").count()
    if name == "struct_key_window_update":
        return a.groupBy(W, "e").agg(F.count("*").alias("count"), F.max("tags"), F.min("e.n"))
    if name == "nested_field_keys_update":
        b = a.selectExpr("ts", "e.user.country AS country", "e.n AS n", "tags")
        return b.groupBy(W, "country").agg(F.sum("n"), F.min("tags"), F.count("*").alias("count"))
    if name == "struct_dedup":
        return a.dropDuplicates(["e", "ts"]).selectExpr("ts", "e", "e.user.id")
    if name == "list_key_complete":
        return a.groupBy("tags").count()
    if name == "map_value_key_update":
        return a.selectExpr("ts", "attrs['k'] AS k").groupBy(W, "k").count()
    if name == "explode_map_window":
        return a.select("ts", F.explode("attrs")).groupBy(W, "key").agg(F.sum("value"), F.count("*").alias("count"))
    if name == "index_out_of_range":
        return a.selectExpr("ts", "tags[1] AS second")
    if name == "map_key_complete":
        return a.groupBy("attrs").count()
    if name == "nested_dedup_key":
        return a.dropDuplicates(["e.n"])
    if name == "struct_key_session":
        return a.groupBy(F.session_window("ts", "5 minutes"), "e").agg(F.count("*").alias("count"))
    if name == "explode_outer_map_dedup":
        return a.select("ts", F.explode_outer("attrs")).dropDuplicates(["key", "ts"])
    if name == "posexplode_map_window_update":
        return a.select("ts", F.posexplode("attrs")).groupBy(W, "pos", "key").agg(F.sum("value"))
    raise KeyError(name)


def run(spark, name, sc, base):
    src = {}
    for s, (schema, wm, files) in sc["sources"].items():
        d = os.path.join(base, name, s)
        os.makedirs(d)
        for i, rows in enumerate(files):
            path = os.path.join(d, f"part-{i:04d}.json")
            with open(path, "w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
            os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # Spark takes files in mtime order
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(d)
        if wm:
            df = df.withWatermark(*wm)
        src[s] = df
    try:
        q = query(name, src)
    except Exception as e:  # an analysis error: record it
        return {"error": str(e).splitlines()[0][:300], "at": "plan"}
    out = {}

    def fe(df, bid):
        out[bid] = sorted((tuple(norm(v) for v in r) for r in df.collect()), key=repr)
    sq = None
    try:
        sq = (q.writeStream.outputMode(sc.get("output_mode", "append")).foreachBatch(fe)
              .option("checkpointLocation", os.path.join(base, name, "chk")).trigger(availableNow=True).start())
        sq.awaitTermination()
    except Exception as e:
        msg = str(e)
        err = next((ln for ln in msg.splitlines() if "[" in ln and "]" in ln), msg.splitlines()[0])
        return {"error": err.strip()[:300], "at": "start" if sq is None else "run", "batches": out}
    progress = sq.recentProgress
    return {
        "columns": q.columns,
        "batches": out,
        "watermarks": [p["eventTime"].get("watermark") for p in progress],
        "num_input_rows": [p["numInputRows"] for p in progress],
        # per stateful operator, as Spark lists them: (name, total, updated, removed, dropped by watermark)
        "state": [[(o["operatorName"], o["numRowsTotal"], o["numRowsUpdated"], o["numRowsRemoved"],
                    o["numRowsDroppedByWatermark"]) for o in p["stateOperators"]] for p in progress],
    }


def main():
    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(SCENARIOS)
    res = {}
    with tempfile.TemporaryDirectory() as base:
        for name in names:
            res[name] = run(spark, name, SCENARIOS[name], base)
            print(name, "done", file=sys.stderr)
    print('"""Per-batch results of Apache Spark 4.3.0 for tests/operators/nested_scenarios.py, recorded by')
    print("docs/spark/record_nested.py (local[2], 2 shuffle partitions, maxFilesPerTrigger=1, availableNow,")
    print("foreachBatch). Do not edit by hand. state: per batch, per stateful operator in Spark's order")
    print('(downstream first): (name, numRowsTotal, numRowsUpdated, numRowsRemoved, numRowsDroppedByWatermark)."""')
    print("EXPECTED = " + pprint.pformat(res, width=110, sort_dicts=False))


if __name__ == "__main__":
    main()

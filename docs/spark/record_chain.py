"""Record Apache Spark's per-batch results for tests/operators/chain_scenarios.py.

Not part of the product or its tests (pyspark is no dependency): run it by hand in a separate venv,
    python3 -m venv /tmp/sparkvenv && /tmp/sparkvenv/bin/pip install pyspark==4.3.0
    TZ=UTC /tmp/sparkvenv/bin/python docs/spark/record_chain.py > /tmp/chain_expected.py
local[2], 2 shuffle partitions, file sources with maxFilesPerTrigger=1, trigger(availableNow=True),
foreachBatch collecting each batch. Prints a Python module (tests/operators/chain_spark_expected.py).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import pprint
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "operators"))
from chain_scenarios import COND, SCENARIOS  # noqa: E402

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402


def norm(v):
    if isinstance(v, dt.datetime):
        s = v.strftime("%Y-%m-%d %H:%M:%S")
        return s + (f".{v.microsecond:06d}" if v.microsecond else "")
    if hasattr(v, "asDict"):
        return tuple(norm(x) for x in v)
    return v


def spark_schema(s: str) -> str:
    return s.replace("STRING", "STRING")


def query(name, src):
    name = SCENARIOS[name].get("query", name)
    W = F.window
    if name in ("union_agg", "union_agg_max"):
        return src["a"].union(src["b"]).groupBy(W("ts", "10 minutes")).count()
    if name == "union_by_name_agg":
        u = src["a"].unionByName(src["b"], allowMissingColumns=True)
        return u.groupBy(W("ts", "10 minutes"), "k").agg(F.count("*").alias("count"), F.sum("v").alias("sum(v)"))
    if name == "window_of_windows":
        w1 = src["a"].groupBy(W("ts", "10 minutes"), "k").count()
        return w1.groupBy(W(F.window_time("window"), "30 minutes")).agg(F.sum("count").alias("total"),
                                                                       F.count("*").alias("n"))
    if name == "dedup_agg":
        return src["a"].dropDuplicates(["k", "ts"]).groupBy(W("ts", "10 minutes")).count()
    if name == "dedup_within_wm_agg":
        return src["a"].dropDuplicatesWithinWatermark(["k"]).groupBy(W("ts", "10 minutes")).count()
    if name == "join_agg":
        j = src["i"].alias("i").join(src["c"].alias("c"), F.expr(COND))
        return j.groupBy(W("click_time", "30 minutes")).count()
    if name == "left_join_agg":
        j = src["i"].alias("i").join(src["c"].alias("c"), F.expr(COND), "left_outer")
        return j.groupBy(W("imp_time", "30 minutes")).agg(F.count("*").alias("count"),
                                                        F.count("click_id").alias("clicks"))
    if name == "join_agg_imp_time":
        j = src["i"].alias("i").join(src["c"].alias("c"), F.expr(COND))
        return j.groupBy(W("imp_time", "30 minutes")).agg(F.count("*").alias("count"), F.max("click_id").alias("last_click"))
    if name == "agg_left_join":
        ia = src["i"].groupBy(W("imp_time", "30 minutes"), "ad_id").agg(F.count("*").alias("imps"))
        ca = src["c"].groupBy(W("click_time", "30 minutes"), "ad_id").agg(F.count("*").alias("clicks"))
        return ia.join(ca, ["window", "ad_id"], "left_outer")
    if name in ("window_of_window_struct",):
        w1 = src["a"].groupBy(W("ts", "10 minutes"), "k").count()
        return w1.groupBy(W("window", "30 minutes")).agg(F.sum("count").alias("total"))
    if name == "window_of_windows_update":
        w1 = src["a"].groupBy(W("ts", "10 minutes"), "k").count()
        return w1.groupBy(W(F.window_time("window"), "30 minutes")).agg(F.sum("count").alias("total"))
    if name == "union_dedup_agg":
        u = src["a"].union(src["b"]).dropDuplicates(["k", "ts"])
        return u.groupBy(W("ts", "10 minutes"), "k").count()
    if name == "session_then_window":
        s1 = src["a"].groupBy(F.session_window("ts", "5 minutes"), "k").count()
        return s1.groupBy(W(F.window_time("session_window"), "30 minutes")).agg(F.sum("count").alias("total"))
    if name == "union_join":
        clicks = src["c"].union(src["d"])
        j = src["i"].alias("i").join(clicks.alias("c"), F.expr(COND))
        return j.select("imp_id", "click_id", "click_time")
    if name == "join_only":
        return src["i"].alias("i").join(src["c"].alias("c"), F.expr(COND)).select("imp_id", "click_id")
    if name == "agg_join":
        ia = src["i"].groupBy(W("imp_time", "30 minutes"), "ad_id").agg(F.count("*").alias("imps"))
        ca = src["c"].groupBy(W("click_time", "30 minutes"), "ad_id").agg(F.count("*").alias("clicks"))
        return ia.join(ca, ["window", "ad_id"])
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
    for k, v in (sc.get("options") or {}).items():
        if k == "multiple_watermark_policy":
            spark.conf.set("spark.sql.streaming.multipleWatermarkPolicy", v)
    try:
        q = query(name, src)
    except Exception as e:  # an analysis error: record it
        spark.conf.set("spark.sql.streaming.multipleWatermarkPolicy", "min")
        return {"error": str(e).splitlines()[0][:300]}
    out = {}

    def fe(df, bid):
        out[bid] = sorted((tuple(norm(v) for v in r) for r in df.collect()), key=repr)
    try:
        sq = (q.writeStream.outputMode(sc.get("output_mode", "append")).foreachBatch(fe)
              .option("checkpointLocation", os.path.join(base, name, "chk")).trigger(availableNow=True).start())
        sq.awaitTermination()
        progress = sq.recentProgress
        columns = q.columns
    except Exception as e:
        return {"error": str(e).splitlines()[0][:300]}
    finally:
        spark.conf.set("spark.sql.streaming.multipleWatermarkPolicy", "min")
    return {
        "columns": columns,
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
    spark.sparkContext.setLogLevel("ERROR")
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(SCENARIOS)
    res = {}
    with tempfile.TemporaryDirectory() as base:
        for name in names:
            res[name] = run(spark, name, SCENARIOS[name], base)
            print(name, "done", file=sys.stderr)
    print('"""Per-batch results of Apache Spark 4.3.0 for tests/operators/chain_scenarios.py, recorded by')
    print("docs/spark/record_chain.py (local[2], 2 shuffle partitions, maxFilesPerTrigger=1, availableNow,")
    print("foreachBatch). Do not edit by hand. state: per batch, per stateful operator in Spark's order")
    print('(downstream first): (name, numRowsTotal, numRowsUpdated, numRowsRemoved, numRowsDroppedByWatermark)."""')
    print("EXPECTED = " + pprint.pformat(res, width=110, sort_dicts=False))


if __name__ == "__main__":
    main()

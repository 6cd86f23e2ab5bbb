"""Record Apache Spark's per-batch results for the join scenarios of tests/operators/join_spark_expected.py.

Not part of the product or its tests (pyspark is no dependency): run it by hand in a separate venv,
    python3 -m venv /tmp/sparkvenv && /tmp/sparkvenv/bin/pip install pyspark==4.3.0
    TZ=UTC /tmp/sparkvenv/bin/python docs/spark/record_join.py > /tmp/join_expected.py
    TZ=UTC /tmp/sparkvenv/bin/python docs/spark/record_join.py --check [name ...]
local[2], 2 shuffle partitions, file sources with maxFilesPerTrigger=1 (the same files as
join_testutil.scenario_sources writes), withWatermark 10 minutes on both sides,
trigger(availableNow=True), foreachBatch collecting each batch. The first form prints the module
tests/operators/join_spark_expected.py; --check compares Spark's results with the committed module
instead (rows of a batch as a multiset, everything else exactly) and exits 1 on a difference.

The scenarios are the committed module's names with their (data, how, kind): data is one of
join_testutil.DATA, kind is the query shape of join_testutil.parity_query (ss: imps ⋈ clicks on COND;
rev: clicks ⋈ imps on COND; strict: COND_STRICT; pre: COND_PRE; using: on ["ad_id"]; static /
static_using: clicks ⋈ a static JSON file of DIM_ROWS on c.ad_id = d.ad_id / ["ad_id"]).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import pprint
import sys
import tempfile
import types
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "operators"))
# join_testutil's scenario data are plain constants; its run helpers need increments, which this venv
# lacks: stand-ins for its two imports (none of what they provide is used here)
sys.modules.setdefault("increments", types.ModuleType("increments"))
sys.modules.setdefault("jsonl_testutil", types.SimpleNamespace(write_files=None))
from join_spark_expected import EXPECTED  # noqa: E402
from join_testutil import (CLICK_SCHEMA, COND, COND_PRE, COND_STRICT, DATA, DIM_ROWS, IMP_SCHEMA,  # noqa: E402
                           ts)

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402


def norm(v):
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return v


def write(d, files, names):
    os.makedirs(d)
    for i, rows in enumerate(files):
        path = os.path.join(d, f"part-{i:04d}.json")
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(dict(zip(names, (r[0], r[1], ts(r[2]))))) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # Spark takes files in mtime order


def query(spark, base, data, how, kind):
    imps_files, clicks_files = DATA[data]
    write(os.path.join(base, "imps"), imps_files, ["imp_id", "ad_id", "imp_time"])
    write(os.path.join(base, "clicks"), clicks_files, ["click_id", "ad_id", "click_time"])
    imps = (spark.readStream.schema(IMP_SCHEMA).option("maxFilesPerTrigger", 1).json(os.path.join(base, "imps"))
            .withWatermark("imp_time", "10 minutes").alias("i"))
    clicks = (spark.readStream.schema(CLICK_SCHEMA).option("maxFilesPerTrigger", 1)
              .json(os.path.join(base, "clicks")).withWatermark("click_time", "10 minutes").alias("c"))
    if kind == "ss":
        return imps.join(clicks, F.expr(COND), how)
    if kind == "rev":
        return clicks.join(imps, F.expr(COND), how)
    if kind == "strict":
        return imps.join(clicks, F.expr(COND_STRICT), how)
    if kind == "pre":
        return imps.join(clicks, F.expr(COND_PRE), how)
    if kind == "using":
        return imps.join(clicks, ["ad_id"], how)
    d = os.path.join(base, "dim")
    os.makedirs(d)
    with open(os.path.join(d, "dim.json"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in DIM_ROWS))
    dim = spark.read.schema("ad_id BIGINT, campaign STRING").json(d)
    if kind == "static":
        return clicks.join(dim.alias("d"), F.expr("c.ad_id = d.ad_id"), how)
    return clicks.join(dim, ["ad_id"], how)


def run(spark, name, sc, base):
    q = query(spark, os.path.join(base, name), sc["data"], sc["how"], sc["kind"])
    out = {}

    def fe(df, bid):
        out[bid] = sorted((tuple(norm(v) for v in r) for r in df.collect()), key=repr)
    sq = (q.writeStream.outputMode("append").foreachBatch(fe)
          .option("checkpointLocation", os.path.join(base, name, "chk")).trigger(availableNow=True).start())
    sq.awaitTermination()
    progress = sq.recentProgress

    def state(p):
        ops = [o for o in p["stateOperators"] if o["operatorName"] == "symmetricHashJoin"]
        return None if not ops else (ops[0]["numRowsTotal"], ops[0]["numRowsUpdated"], ops[0]["numRowsRemoved"],
                                     ops[0]["numRowsDroppedByWatermark"])
    return {"data": sc["data"], "how": sc["how"], "kind": sc["kind"], "columns": q.columns,
            "batches": dict(sorted(out.items())),
            "watermarks": [p["eventTime"].get("watermark") for p in progress],
            "num_input_rows": [p["numInputRows"] for p in progress],
            "state": [state(p) for p in progress]}


def differences(name, got, exp):
    """What differs between Spark's result and the committed one (empty: they agree)."""
    out = []
    for k in ("columns", "watermarks", "num_input_rows", "state"):
        if got[k] != exp[k]:
            out.append(f"{name}: {k}: Spark {got[k]!r}, committed {exp[k]!r}")
    if sorted(got["batches"]) != sorted(exp["batches"]):
        out.append(f"{name}: batch ids: Spark {sorted(got['batches'])}, committed {sorted(exp['batches'])}")
    for b, rows in exp["batches"].items():
        if Counter(got["batches"].get(b, [])) != Counter(rows):
            out.append(f"{name}: batch {b}: Spark {got['batches'].get(b)!r}, committed {rows!r}")
    return out


def main():
    check = "--check" in sys.argv
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(EXPECTED)
    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    res, diffs = {}, []
    with tempfile.TemporaryDirectory() as base:
        for name in names:
            res[name] = run(spark, name, EXPECTED[name], base)
            if check:
                found = differences(name, res[name], EXPECTED[name])
                diffs += found
                print(name, "differs:" if found else "agrees", *found, flush=True)
            print(name, "done", file=sys.stderr)
    if check:
        print(f"{len(names)} scenarios, {len(diffs)} differences from join_spark_expected.py")
        sys.exit(1 if diffs else 0)
    print('"""Per-batch results of Apache Spark 4.3.0 (pyspark, local[2], shuffle partitions 2, file sources with')
    print("maxFilesPerTrigger=1, withWatermark 10 minutes on both sides, trigger(availableNow=True),")
    print("foreachBatch) for the queries of join_testutil.parity_query. Recorded by docs/spark/record_join.py;")
    print("do not edit by hand. state: (numRowsTotal, numRowsUpdated, numRowsRemoved, numRowsDroppedByWatermark)")
    print('of the join operator per batch (None: no state operator). Timestamps are UTC.\n"""')
    print("EXPECTED = " + pprint.pformat(res, width=110, sort_dicts=False))


if __name__ == "__main__":
    main()

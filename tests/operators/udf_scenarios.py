"""UDF and map_in_* scenarios run by both engines: docs/spark/record_udf.py (PySpark 4.3) and
test_udf_spark_parity.py (increments). One query function serves both: it is written with the
camelCase names both APIs have (withWatermark, groupBy, withColumn, mapInArrow, mapInPandas) and
gets the engine's `functions` module as F. The user functions are plain Python over pyarrow /
pandas, the same objects in both runs. File i of a source is batch i (maxFilesPerTrigger=1)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

SCHEMA = "k STRING, v BIGINT, ts TIMESTAMP"


def t(hm: str) -> str:
    return f"2024-01-01T{hm}:00Z"


def r(k, v, hm):
    return {"k": k, "v": v, "ts": t(hm)}


# -- the user functions ----------------------------------------------------------------------
def norm(s):
    """Row UDF: trimmed, lower-cased key (None stays None)."""
    return None if s is None else s.strip().lower()


def keep(s):
    """Row UDF (boolean): drop the rows whose key is 'drop'."""
    return s != "drop"


def cents(v):
    """pandas UDF: v * 100 as a double."""
    return v * 100.0


def small_doubled(batches):
    """map_in_arrow: keep v < 10, emit (k, w = v * 2, ts)."""
    for b in batches:
        b = b.filter(pc.less(b.column("v"), 10))
        yield pa.RecordBatch.from_arrays([b.column("k"), pc.multiply(b.column("v"), 2), b.column("ts")],
                                         names=["k", "w", "ts"])


def pandas_upper(frames):
    """map_in_pandas: upper-cased keys, v + 1."""
    for df in frames:
        yield df.assign(k=df["k"].str.upper(), v=df["v"] + 1)


# a filtered-out row ("drop") carries the batch's max event time: where the filter sits relative
# to the watermark decides the watermark
FILES_FILTER = [
    [r("a", 1, "10:00"), r(" A", 2, "10:03"), r("drop", 3, "10:30")],
    [r("b", 4, "10:08"), r("a", 5, "10:12")],
    [r("a", 6, "10:25")],
    [r("B ", 7, "10:41")],
]
FILES = [
    [r("a", 1, "10:00"), r("a", 2, "10:03"), r("b", 30, "10:05")],
    [r("b", 4, "10:08"), r("a", 5, "10:14")],
    [r("a", 6, "10:26"), r("b", 70, "10:27")],
    [r("b", 8, "10:45")],
]

SCENARIOS = {
    "udf_filter_after_watermark": FILES_FILTER,
    "udf_key_window_count": FILES_FILTER,
    "udf_select_key_window": FILES_FILTER,
    "pandas_udf_with_column_sum": FILES,
    "map_in_arrow_then_watermark": FILES,
    "map_in_pandas_then_watermark": FILES,
    "watermark_then_map_in_arrow": FILES,
}


def query(name: str, src, F):
    W = F.window
    normu = F.udf(norm, "string")
    keepu = F.udf(keep, "boolean")
    centsu = F.pandas_udf(cents, "double")
    if name == "udf_filter_after_watermark":
        return (src.withWatermark("ts", "5 minutes").filter(keepu("k"))
                .groupBy(W("ts", "10 minutes")).count())
    if name == "udf_key_window_count":
        return (src.filter(keepu("k")).withWatermark("ts", "5 minutes")
                .groupBy(W("ts", "10 minutes"), normu("k")).count())
    if name == "udf_select_key_window":
        s = src.select(normu("k").alias("key"), "ts", "v").filter("key <> 'drop'")
        return s.withWatermark("ts", "5 minutes").groupBy(W("ts", "10 minutes"), "key").count()
    if name == "pandas_udf_with_column_sum":
        s = src.withWatermark("ts", "5 minutes").withColumn("c", centsu("v"))
        return s.groupBy(W("ts", "10 minutes"), "k").agg(F.sum("c").alias("total"))
    if name == "map_in_arrow_then_watermark":
        m = src.mapInArrow(small_doubled, "k STRING, w BIGINT, ts TIMESTAMP")
        return m.withWatermark("ts", "5 minutes").groupBy(W("ts", "10 minutes"), "k").agg(F.sum("w").alias("total"))
    if name == "map_in_pandas_then_watermark":
        m = src.mapInPandas(pandas_upper, SCHEMA)
        return m.withWatermark("ts", "5 minutes").groupBy(W("ts", "10 minutes"), "k").agg(F.max("v").alias("top"))
    if name == "watermark_then_map_in_arrow":
        m = src.withWatermark("ts", "5 minutes").mapInArrow(small_doubled, "k STRING, w BIGINT, ts TIMESTAMP")
        return m.groupBy(W("ts", "10 minutes"), "k").agg(F.sum("w").alias("total"))
    raise KeyError(name)

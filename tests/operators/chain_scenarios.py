"""Input files of the chained-operator and union scenarios compared with Apache Spark 4.3.0
(chain_spark_expected.py, recorded by docs/spark/record_chain.py on exactly these files).

Each scenario: sources (name -> schema, watermark (column, delay) or None, one list of rows per
file; batch k reads file k of every source), the query (built by test_chain_spark_parity.py with
increments and by the recorder with PySpark) and write_stream options. Times are 2024-01-01 UTC.
"""
from __future__ import annotations


def t(hhmm: str | None) -> str | None:
    return None if hhmm is None else f"2024-01-01T{hhmm}:00Z"


def rows(keys: tuple[str, ...], data: list[list[tuple]]) -> list[list[dict]]:
    return [[dict(zip(keys, [t(v) if k in ("ts", "imp_time", "click_time") else v for k, v in zip(keys, r)]))
             for r in f] for f in data]


KT = "k STRING, ts TIMESTAMP"
# a's watermark runs ahead of b's: a4 (10:12, batch 2) is behind a's own watermark (10:30) but not the
# global one (min: 09:50), so it is counted; b4 (09:40) is late for the global one.
UNION_A = rows(("k", "ts"), [[("a1", "10:00"), ("a2", "10:05")], [("a3", "10:40")], [("a4", "10:12")], [("a5", "11:30")]])
UNION_B = rows(("k", "ts"), [[("b1", "10:02")], [("b2", "10:20")], [("b3", "10:15"), ("b4", "09:40")], [("b5", "10:50")]])
BYNAME_A = rows(("k", "ts", "v"), [[("x", "10:00", 1), ("y", "10:03", 2)], [("x", "10:21", 3)], [("y", "10:45", 4)]])
BYNAME_B = [[{"ts": t("10:04"), "k": "x"}], [{"ts": t("10:12"), "k": "y"}, {"ts": t("09:58"), "k": "x"}],
            [{"ts": t("10:30"), "k": "x"}]]
# window of windows: x 10:14 and y 10:02 in batch 2 are not late (WL = 10:07); y 10:05 in batch 3 is
CHAIN = rows(("k", "ts"), [[("x", "10:01"), ("x", "10:03"), ("y", "10:12")], [("x", "10:25"), ("y", "10:31")],
                           [("x", "10:14"), ("y", "10:02")], [("x", "11:05"), ("y", "10:05")]])
# dedup before an aggregation: duplicates in one batch and across batches, a late row (5 at 10:01)
DEDUP = rows(("k", "ts"), [[("1", "10:00"), ("1", "10:00"), ("2", "10:05")], [("1", "10:00"), ("3", "10:22")],
                           [("4", "10:08"), ("2", "10:05")], [("5", "10:01"), ("6", "10:40"), ("3", "10:22")]])
# the join scenario of join_testutil (IMPS / CLICKS), plus a batch that moves the watermark on
IMPS = rows(("imp_id", "ad_id", "imp_time"), [
    [("i1", 1, "10:00"), ("i2", 2, "10:00")],
    [("i3", 3, "12:00")],
    [("i4", 4, "11:45"), ("i5", 5, "10:30"), ("i6", 6, "10:30")],
    [("i7", 7, "14:00"), ("i9", 9, "12:00"), ("i10", 10, "12:40")],
])
CLICKS = rows(("click_id", "ad_id", "click_time"), [
    [("c1", 1, "10:20")],
    [("c9", 9, "12:30"), ("c1b", 1, "10:50"), ("c8", 8, "12:40")],
    [("c4", 4, "11:55"), ("c5", 5, "10:40"), ("cL", 1, "09:40"), ("c6", 66, "10:45")],
    [("c7", 7, "14:10"), ("c10", 10, "12:50")],
])
# i12 (11:05, batch 2) is stored by the join; c12 (11:55, batch 3) meets it: the pair's imp_time window
# [11:00, 11:30) ends before the global watermark of batch 2 (11:50) but not before the join's output
# watermark (11:50 - 1 h - 1 ms): Spark counts it (in the trailing batch) instead of dropping it as late
IMPS2 = IMPS[:2] + [IMPS[2] + rows(("imp_id", "ad_id", "imp_time"), [[("i12", 12, "11:05")]])[0]] + IMPS[3:]
CLICKS2 = CLICKS[:3] + [CLICKS[3] + rows(("click_id", "ad_id", "click_time"), [[("c12", 12, "11:55")]])[0]]
IMP_SCHEMA = "imp_id STRING, ad_id BIGINT, imp_time TIMESTAMP"
CLICK_SCHEMA = "click_id STRING, ad_id BIGINT, click_time TIMESTAMP"
COND = "c.ad_id = i.ad_id AND c.click_time BETWEEN i.imp_time AND i.imp_time + INTERVAL 1 HOUR"

TEN = "10 minutes"
SCENARIOS = {
    "union_agg": {"sources": {"a": (KT, ("ts", TEN), UNION_A), "b": (KT, ("ts", "30 minutes"), UNION_B)}},
    "union_agg_max": {"sources": {"a": (KT, ("ts", TEN), UNION_A), "b": (KT, ("ts", "30 minutes"), UNION_B)},
                      "options": {"multiple_watermark_policy": "max"}},
    "union_by_name_agg": {"sources": {"a": ("k STRING, ts TIMESTAMP, v BIGINT", ("ts", TEN), BYNAME_A),
                                      "b": ("ts TIMESTAMP, k STRING", ("ts", TEN), BYNAME_B)}},
    "window_of_windows": {"sources": {"a": (KT, ("ts", "5 minutes"), CHAIN)}},
    "dedup_agg": {"sources": {"a": (KT, ("ts", TEN), DEDUP)}},
    "dedup_within_wm_agg": {"sources": {"a": (KT, ("ts", TEN), DEDUP)}},
    "join_agg": {"sources": {"i": (IMP_SCHEMA, ("imp_time", TEN), IMPS), "c": (CLICK_SCHEMA, ("click_time", TEN), CLICKS)}},
    "left_join_agg": {"sources": {"i": (IMP_SCHEMA, ("imp_time", TEN), IMPS),
                                  "c": (CLICK_SCHEMA, ("click_time", TEN), CLICKS)}},
    "join_agg_imp_time": {"sources": {"i": (IMP_SCHEMA, ("imp_time", TEN), IMPS2),
                                      "c": (CLICK_SCHEMA, ("click_time", TEN), CLICKS2)}},
    "agg_left_join": {"sources": {"i": (IMP_SCHEMA, ("imp_time", TEN), IMPS),
                                  "c": (CLICK_SCHEMA, ("click_time", TEN), CLICKS)}},
    "window_of_window_struct": {"sources": {"a": (KT, ("ts", "5 minutes"), CHAIN)}},
    "union_dedup_agg": {"sources": {"a": (KT, ("ts", TEN), UNION_A), "b": (KT, ("ts", "30 minutes"), UNION_B)}},
    # refused: two aggregations in update mode (Spark: only append mode chains stateful operators)
    "window_of_windows_update": {"sources": {"a": (KT, ("ts", "5 minutes"), CHAIN)}, "output_mode": "update"},
    "session_then_window": {"sources": {"a": (KT, ("ts", "5 minutes"), CHAIN)}},
    "union_join": {"sources": {"i": (IMP_SCHEMA, ("imp_time", TEN), IMPS),
                               "c": (CLICK_SCHEMA, ("click_time", TEN), [f[:1] for f in CLICKS]),
                               "d": (CLICK_SCHEMA, ("click_time", "20 minutes"), [f[1:] for f in CLICKS])}},
    # output modes other than append ("query": the query of another scenario)
    "join_agg_update": {"query": "join_agg", "output_mode": "update",
                        "sources": {"i": (IMP_SCHEMA, ("imp_time", TEN), IMPS),
                                    "c": (CLICK_SCHEMA, ("click_time", TEN), CLICKS)}},
    "join_update": {"query": "join_only", "output_mode": "update",
                    "sources": {"i": (IMP_SCHEMA, ("imp_time", TEN), IMPS), "c": (CLICK_SCHEMA, ("click_time", TEN), CLICKS)}},
    "dedup_agg_update": {"query": "dedup_agg", "output_mode": "update", "sources": {"a": (KT, ("ts", TEN), DEDUP)}},
    "dedup_agg_complete": {"query": "dedup_agg", "output_mode": "complete", "sources": {"a": (KT, ("ts", TEN), DEDUP)}},
    "agg_join": {"sources": {"i": (IMP_SCHEMA, ("imp_time", TEN), IMPS), "c": (CLICK_SCHEMA, ("click_time", TEN), CLICKS)}},
}

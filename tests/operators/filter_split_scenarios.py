"""Input files and filters of the filter-split scenarios compared with Apache Spark 4.3.0
(filter_split_spark_expected.py, recorded by docs/spark/record_filter_split.py on exactly these files).

Each scenario: a file source (SCHEMA, one file per batch) -> with_watermark("ts", "10 minutes") ->
the scenario's `before` steps (select / with_column), then its filters, applied in order -> group_by(window("ts", "10 minutes")).count(), in the
scenario's output mode. Spark splits a filter over the watermark at its ANDs: the conjuncts that do
not reference ts are applied below it (the rows they drop never feed the max event time, and a JSON
scan gets them pushed, so numInputRows excludes those rows); the others above it. Times are
2024-01-01 UTC.
"""
from __future__ import annotations

SCHEMA = "k STRING, v BIGINT, ts TIMESTAMP"


def _rows(data: list[list[tuple]]) -> list[list[dict]]:
    return [[{"k": k, "v": v, "ts": f"2024-01-01T{hhmm}:00Z"} for k, v, hhmm in f] for f in data]


# b (v=1, 10:50) is dropped by `v >= 3`: below the watermark it does not move it (WM 09:50 after batch 0,
# so a4 at 10:05 in batch 1 is counted); above it, it would (WM 10:40: a4 late). d (11:30) is dropped by
# `ts < 11:00`, which stays above: it moves the watermark to 11:20 and closes the 10:00 and 10:10 windows.
# The row keyed 'ts' (10:55) is dropped by `k != 'ts'`, which names the column only in a string literal.
FILES = _rows([
    [("a1", 5, "10:00"), ("b", 1, "10:50"), ("ts", 8, "10:55")],
    [("a4", 4, "10:05"), ("c", 6, "10:12")],
    [("d", 7, "11:30")],
    [("e", 3, "11:25"), ("f", 9, "10:40")],
])
BEFORE_11 = "ts < TIMESTAMP '2024-01-01 11:00:00'"

SCENARIOS = {
    "and_split": {"filters": [f"v >= 3 AND {BEFORE_11} AND k != 'ts'"]},
    "and_split_update": {"filters": [f"v >= 3 AND {BEFORE_11} AND k != 'ts'"], "output_mode": "update"},
    "chained_filters": {"filters": [BEFORE_11, "v >= 3", "k != 'ts'"]},
    "literal_spells_column": {"filters": ["k != 'ts' AND v >= 3"]},
    "event_time_first": {"filters": [f"{BEFORE_11} AND (v >= 3 AND k != 'ts')"]},
    "or_stays_above": {"filters": ["v >= 3 OR ts < TIMESTAMP '2024-01-01 10:30:00'"]},
    # a projection or with_column between with_watermark and the filter: Spark pushes the filter
    # through it (PushPredicateThroughNonJoin over a deterministic Project), then splits it
    "select_then_filter": {"before": [("select", ["k", "v", "ts"])], "filters": [f"v >= 3 AND {BEFORE_11} AND k != 'ts'"]},
    "with_column_then_filter": {"before": [("with_column", "w", "v * 10")],
                                "filters": [f"v >= 3 AND {BEFORE_11} AND k != 'ts'"]},
}

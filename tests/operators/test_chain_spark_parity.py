"""Chained stateful operators and unions against Apache Spark 4.3.0: every scenario of
chain_scenarios.py, recorded from real Spark on the same files (chain_spark_expected.py, by
docs/spark/record_chain.py), run through increments and compared batch by batch: the batch ids
(including the trailing no-data batch), the rows of each batch, the watermark, num_input_rows and
every stateful operator's (name, num_rows_total, updated, removed, dropped_by_watermark).

Spark lists state operators in plan pre-order (downstream first), increments in the order they
were built (upstream first), so each batch's operators are compared as a multiset.
Covered: union and union_by_name (allow_missing_columns) of streams with different watermark
delays, min and max policy; a window over window_time(window) of a first windowed aggregation;
dedup (and dedup within watermark) before an aggregation; an aggregation after a time-bounded
inner and left outer stream-stream join (the join's output watermark: W - 1 hour - 1 ms); a join
of two windowed aggregations on the window (Spark's key state watermark: window.end <= W), inner and
left outer; a window over window_time(session_window) of a session aggregation; a union of two click
streams (different delays) joined with impressions; two aggregations in update mode (refused)."""
from __future__ import annotations

from collections import Counter

import pytest

from increments.errors import AnalysisException

from chain_spark_expected import EXPECTED
from chain_testutil import run

ROCKSDB = {"join_agg", "window_of_windows"}


def _state(progress) -> list[Counter]:
    return [Counter((o["operator_name"], o["num_rows_total"], o["num_rows_updated"], o["num_rows_removed"],
                     o["num_rows_dropped_by_watermark"]) for o in p["state_operators"]) for p in progress]


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if "error" not in EXPECTED[n]))
def test_same_as_spark(tmp_path, name):
    exp = EXPECTED[name]
    batches, progress, columns = run(tmp_path, name, state_store="rocksdb" if name in ROCKSDB else "memory")
    assert columns == exp["columns"]
    assert [p["batch_id"] for p in progress] == list(range(len(exp["watermarks"])))
    assert {b: rows for b, rows in batches.items()} == {b: list(rows) for b, rows in exp["batches"].items()}
    assert [p["event_time"]["watermark"] for p in progress] == exp["watermarks"]
    assert [p["num_input_rows"] for p in progress] == exp["num_input_rows"]
    assert _state(progress) == [Counter(s) for s in exp["state"]]


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if "error" in EXPECTED[n]))
def test_refused_as_spark_refuses(tmp_path, name):
    """Spark refuses chained stateful operators outside append mode; so does increments, at start."""
    with pytest.raises(AnalysisException):
        run(tmp_path, name)

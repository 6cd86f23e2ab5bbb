"""Joins against Apache Spark 4.3.0: every scenario in join_spark_expected.py (recorded from real Spark
on the same input files) is run through increments and compared batch by batch: the batch ids
(including the trailing no-data batch), the rows of each batch (as a multiset), the watermark,
num_input_rows and the join operator's num_rows_total / updated / removed / dropped_by_watermark.

Inner, left/right/full outer and left semi stream-stream joins (range condition with inclusive and
strict bounds, both side orders), column-list `on`, stream-static inner and left outer joins.
Output column names: Spark repeats a name that occurs on both sides (`ad_id`, `ad_id`); increments
qualifies such names with the side's alias (`i.ad_id`, `c.ad_id`) so that they stay addressable, so
the names are compared with the alias stripped."""
from __future__ import annotations

from collections import Counter

import pytest

from join_spark_expected import EXPECTED
from join_testutil import join_op, norm, parity_query, run

ROCKSDB = {"base_left_outer", "edge_full_outer", "edge_left_semi"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_same_as_spark(tmp_path, name):
    exp = EXPECTED[name]
    q = parity_query(tmp_path, exp["data"], exp["how"], exp["kind"])
    batches, progress = run(q, tmp_path, state_store="rocksdb" if name in ROCKSDB else "memory")
    assert [p["batch_id"] for p in progress] == list(range(len(exp["watermarks"])))
    assert sorted(b for b, rows in batches.items()) == sorted(exp["batches"])
    for b, rows in exp["batches"].items():
        got = Counter(tuple(norm(v) for v in r.values()) for r in batches[b])
        assert got == Counter(rows), f"batch {b}"
        if batches[b]:
            assert [c.split(".")[-1] for c in batches[b][0]] == exp["columns"]
    assert [p["event_time"]["watermark"] for p in progress] == exp["watermarks"]
    assert [p["num_input_rows"] for p in progress] == exp["num_input_rows"]
    got_state = []
    for p in progress:
        ops = [op for op in p["state_operators"] if op["operator_name"] == "symmetricHashJoin"]
        got_state.append(None if not ops else (ops[0]["num_rows_total"], ops[0]["num_rows_updated"],
                                                ops[0]["num_rows_removed"], ops[0]["num_rows_dropped_by_watermark"]))
    assert got_state == exp["state"]

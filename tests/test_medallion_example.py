"""examples/medallion.py end to end on real Delta tables: bronze (files) -> silver (expectations,
AUTO CDC SCD type 2) -> gold (an aggregation over silver's change data feed), and again after more
files land: silver does not depend on how the changes were batched, gold equals the same
aggregation computed over the silver table, the quarantine holds the dropped change once."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

import medallion  # noqa: E402

from increments.sinks.delta import read_table  # noqa: E402
from increments.sql import run_sql  # noqa: E402


def _run_all(root: str) -> dict:
    p = medallion.paths(root)
    progress = {}
    for name, build in (("bronze", medallion.bronze), ("silver", medallion.silver), ("gold", medallion.gold)):
        q = build(root).start(p[name])
        q.await_termination()
        progress[name] = q.recent_progress
    return progress


def _table(path: str, sql: str) -> list[tuple]:
    t, _ = read_table(path)
    return [tuple(r.values()) for r in run_sql(sql, {"t": t}).to_pylist()]


def _check(root: str) -> None:
    p = medallion.paths(root)
    gold = _table(p["gold"], "SELECT city, current_customers, versions FROM t ORDER BY city")
    from_silver = _table(p["silver"], "SELECT city, count(*) FILTER (WHERE __end_at IS NULL), count(*) FROM t "
                                      "GROUP BY city ORDER BY city")
    assert gold == from_silver and gold
    overlaps = _table(p["silver"], "SELECT count(*) FROM t a JOIN t b ON a.customer_id = b.customer_id AND "
                                   "a.__start_at < b.__start_at AND (a.__end_at IS NULL OR a.__end_at > b.__start_at)")
    assert overlaps == [(0,)], "a customer's versions never overlap"


def test_bronze_silver_gold(tmp_path):
    root = str(tmp_path / "m")
    p = medallion.paths(root)
    medallion.write_changes(p["landing"], files=4)
    progress = _run_all(root)
    assert len(progress["bronze"]) == 4 and len(progress["silver"]) == 4
    exp = [{e["name"]: (e["passed"], e["failed"]) for e in b["expectations"]} for b in progress["silver"]]
    assert exp[2]["has_customer_id"][1] == 1 and exp[3]["valid_email"][1] == 1
    assert all(e["known_op"][1] == 0 for e in exp)
    _check(root)
    assert _table(p["quarantine"], "SELECT batch_id, expectation, customer_id FROM t") == [(2, "has_customer_id", None)]
    medallion.write_changes(p["landing"], files=3, seed=11)          # later files: each query goes on
    _run_all(root)
    _check(root)
    # the same changes all at once (one silver batch): the same history
    one = str(tmp_path / "one")
    q = medallion.bronze(root).start(p["bronze"])
    q.await_termination()
    import increments as inc
    frame = inc.read_stream.delta(p["bronze"])
    w = (frame.filter("customer_id IS NOT NULL").write_stream
         .apply_changes(keys=["customer_id"], sequence_by="updated_at", apply_as_deletes="op = 'DELETE'",
                        except_columns=["op"], stored_as_scd_type=2, track_history_except_columns=["email"])
         .format("delta").checkpoint_location(os.path.join(one, "chk")).trigger(available_now=True))
    w.start(os.path.join(one, "silver")).await_termination()
    sql = "SELECT * FROM t ORDER BY customer_id, __start_at"
    assert _table(os.path.join(one, "silver"), sql) == _table(p["silver"], sql)
    assert len(_table(p["quarantine"], "SELECT * FROM t")) == 1

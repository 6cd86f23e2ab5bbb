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


def test_medallion_in_the_dagster_definitions_is_one_chain(tmp_path, monkeypatch):
    """Issue 30.4: examples/queries.py registers the three queries (writing nothing at import); the
    asset keys connect (silver reads bronze's table, gold silver's change feed); batches run as
    Dagster runs, silver's expectations are checks on its table, silver's batch names bronze's."""
    import importlib

    import dagster as dg

    monkeypatch.setenv("INCREMENTS_EXAMPLES_DIR", str(tmp_path))
    monkeypatch.delenv("INCREMENTS_CHECKPOINT_ROOT", raising=False)
    import examples.queries as q
    importlib.reload(q)
    from orchestration.factory import definitions_from_module
    defs = definitions_from_module("examples.queries")
    assert os.listdir(tmp_path) == []                                   # nothing written at import
    key = {n: dg.AssetKey(["delta", "lake", f"customers_{n}"]) for n in ("bronze", "silver", "gold")}
    graph = defs.resolve_asset_graph()
    assert graph.get(key["bronze"]).parent_keys == {dg.AssetKey(["files", "landing", "customers"])}
    assert graph.get(key["silver"]).parent_keys == {key["bronze"]}
    assert graph.get(key["gold"]).parent_keys == {key["silver"]}
    checks = {k.name: graph.get_check_spec(k) for k in graph.asset_check_keys if k.asset_key == key["silver"]}
    assert {"has_customer_id", "valid_email", "known_op"} <= set(checks)
    assert checks["known_op"].blocking and not checks["valid_email"].blocking
    medallion.write_changes(medallion.paths(str(tmp_path))["landing"], files=3)
    inst = dg.DagsterInstance.ephemeral()
    for name in ("bronze", "silver", "gold"):
        for _ in range(3):
            assert defs.resolve_job_def(f"customers_{name}_batch").execute_in_process(instance=inst).success
    mats = {n: inst.get_latest_materialization_event(k).asset_materialization for n, k in key.items()}
    assert {n: m.metadata["batch_id"].value for n, m in mats.items()} == {"bronze": "2", "silver": "2", "gold": "2"}
    assert "customers_bronze" in mats["silver"].metadata["upstream"].value      # silver's batch names bronze's
    assert "customers_silver" in mats["gold"].metadata["upstream"].value  # ... and gold's the silver batches (change feed)
    rec = inst.event_log_storage.get_asset_check_execution_history(dg.AssetCheckKey(key["silver"], "has_customer_id"),
                                                                   limit=5)
    assert len(rec) == 3

"""A bronze -> silver -> gold pipeline of three streaming queries over Delta tables:

    bronze  files of customer change events (JSON: customer_id, name, city, email, op, updated_at),
            landed as they come (late, duplicated), appended as-is to a Delta table;
    silver  bronze's new rows -> expectations (a change without a customer id is dropped to a
            quarantine table; a malformed email is counted, kept; an unknown op fails the batch)
            -> AUTO CDC, SCD type 2 (history per customer, __start_at / __end_at from updated_at;
            deletes close the current version); its Delta table has the change data feed on;
    gold    silver's change data feed -> per city: the customers currently there and the history
            versions that ever started there (insert +1, the update images of a closed version
            move the current count, a version removed by a late change -1), complete mode.

    python examples/medallion.py [root]        (default: medallion_output/; runs the three queries
                                                 with trigger(available_now=True), prints the tables)

The same three queries are registered for Dagster in examples/queries.py: the asset graph shows
files/.../landing/customers -> delta/.../customers_bronze -> delta/.../customers_silver ->
delta/.../customers_gold, one chain.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import random
import sys

SCHEMA = "customer_id BIGINT, name STRING, city STRING, email STRING, op STRING, updated_at TIMESTAMP"
CITIES = ["Oslo", "Rome", "Lima", "Kyiv", "Nice"]


def write_changes(landing: str, files: int = 6, customers: int = 12, seed: int = 7) -> int:
    """Write `files` JSON change files (standard library only); returns the number of events.
    Every file holds late changes (older updated_at than changes already landed) and duplicates;
    the third one a change without a customer id, the fourth a malformed email."""
    rnd = random.Random(seed)
    os.makedirs(landing, exist_ok=True)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    existing = len([n for n in os.listdir(landing) if n.endswith(".json")])
    events = 0
    for f in range(existing, existing + files):
        rows = []
        for c in rnd.sample(range(1, customers + 1), 6):
            op = "DELETE" if rnd.random() < 0.12 else ("INSERT" if f == 0 else "UPDATE")
            minutes = f * 60 + rnd.randint(-90, 30)            # up to 1.5 hours late
            rows.append({"customer_id": c, "name": f"customer {c}", "city": rnd.choice(CITIES),
                         "email": f"c{c}@example.com", "op": op,
                         "updated_at": (t0 + dt.timedelta(minutes=minutes, seconds=c)).isoformat()})
        rows.append(dict(rows[0]))                             # a duplicate delivery
        if f == 2:
            rows.append({**rows[1], "customer_id": None, "updated_at": (t0 + dt.timedelta(hours=f)).isoformat()})
        if f == 3:
            rows[2]["email"] = "not an email"
        tmp = os.path.join(landing, f".changes-{f:04d}.json.tmp")
        with open(tmp, "w") as out:
            out.write("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, os.path.join(landing, f"changes-{f:04d}.json"))   # a file appears whole
        events += len(rows)
    return events


def paths(root: str) -> dict[str, str]:
    lake, chk = os.path.join(root, "lake"), os.path.join(root, "chk")
    return {"landing": os.path.join(root, "landing", "customers"),
            "bronze": os.path.join(lake, "customers_bronze"), "silver": os.path.join(lake, "customers_silver"),
            "gold": os.path.join(lake, "customers_gold"), "quarantine": os.path.join(lake, "customers_quarantine"),
            "chk_bronze": os.path.join(chk, "customers_bronze"), "chk_silver": os.path.join(chk, "customers_silver"),
            "chk_gold": os.path.join(chk, "customers_gold")}


def bronze(root: str, trigger: dict | None = None, wait_for_path: bool = False):
    """files -> Delta (append): the raw changes as they landed (wait_for_path: no batch, instead
    of an error, until the landing directory exists, as in the Dagster definitions)."""
    import increments as inc
    p = paths(root)
    changes = inc.read_stream.files(p["landing"], "json", SCHEMA, max_files_per_trigger=1,
                                    **({"wait_for_path": True} if wait_for_path else {}))
    return (changes.write_stream.format("delta").output_mode("append").checkpoint_location(p["chk_bronze"])
            .query_name("customers_bronze").trigger(**(trigger or {"available_now": True})))


def silver(root: str, trigger: dict | None = None):
    """bronze -> expectations -> AUTO CDC SCD type 2 into Delta (change data feed on)."""
    import increments as inc
    p = paths(root)
    changes = (inc.read_stream.delta(p["bronze"], max_files_per_trigger=1)
               .expect_or_drop("has_customer_id", "customer_id IS NOT NULL",
                               quarantine=inc.dead_letter.delta(p["quarantine"]))
               .expect("valid_email", "email LIKE '%_@_%._%'")
               .expect("known_op", "op IN ('INSERT', 'UPDATE', 'DELETE')", on_violation="fail"))
    return (changes.write_stream
            .apply_changes(keys=["customer_id"], sequence_by="updated_at", apply_as_deletes="op = 'DELETE'",
                           except_columns=["op"], stored_as_scd_type=2, track_history_except_columns=["email"])
            .format("delta").option("table_properties", {"delta.enableChangeDataFeed": "true"})
            .checkpoint_location(p["chk_silver"]).query_name("customers_silver")
            .trigger(**(trigger or {"available_now": True})))


def gold(root: str, trigger: dict | None = None):
    """silver's change data feed -> per city: current customers and history versions (complete)."""
    import increments as inc
    from increments import functions as F
    p = paths(root)
    feed = inc.read_stream.delta(p["silver"], read_change_feed=True, starting_version=0, max_files_per_trigger=1)
    moves = (feed.with_column("version_delta", "CASE _change_type WHEN 'insert' THEN 1 WHEN 'delete' THEN -1 "
                                               "ELSE 0 END")
             .with_column("current_delta", "CASE WHEN __end_at IS NOT NULL THEN 0 WHEN _change_type IN ('insert', "
                                           "'update_postimage') THEN 1 ELSE -1 END"))
    per_city = moves.group_by("city").agg(F.sum("current_delta").alias("current_customers"),
                                          F.sum("version_delta").alias("versions"))
    return (per_city.write_stream.format("delta").output_mode("complete").checkpoint_location(p["chk_gold"])
            .query_name("customers_gold").trigger(**(trigger or {"available_now": True})))


def main() -> None:
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "medallion_output")
    p = paths(root)
    n = write_changes(p["landing"])
    print(f"wrote {n} change events into {p['landing']}")
    import increments as inc
    from increments.sinks.console import format_table
    from increments.sinks.delta import read_table
    from increments.sql import run_sql
    for name, build, table in (("bronze", bronze, p["bronze"]), ("silver", silver, p["silver"]),
                               ("gold", gold, p["gold"])):
        q = build(root).start(table)
        q.await_termination()
        last = q.last_progress or {}
        exp = ", ".join(f"{e['name']} {e['passed']}/{e['passed'] + e['failed']}" for e in last.get("expectations", []))
        print(f"{name}: {len(q.recent_progress)} batches" + (f"; last batch's expectations (passed/rows): {exp}"
                                                             if exp else ""))
    for name, sql in (("silver", "SELECT customer_id, city, __start_at, __end_at FROM t ORDER BY 1, 3"),
                      ("gold", "SELECT * FROM t ORDER BY city"), ("quarantine", "SELECT batch_id, expectation, "
                                                                    "name, city FROM t")):
        t, version = read_table(p[name])
        print(f"\n{name} ({p[name]}, version {version}):")
        print(format_table(run_sql(sql, {"t": t}), num_rows=100))
    _ = inc


if __name__ == "__main__":
    main()

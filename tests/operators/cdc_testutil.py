"""Helpers of the AUTO CDC tests: change events, running apply_changes batch by batch into a real
Delta table or PostgreSQL table, reading the target back, and the documented semantics as a
reference model computed from the whole change set at once.

The model is the rule the Databricks documentation states (and Spark 4.3's declarative pipelines
implement), written for a set of events: sort each key's changes by sequence (at an equal sequence
a delete wins); SCD type 1 keeps the last change's row (none if it is a delete); SCD type 2 walks
them: an upsert opens a version unless its tracked columns equal the open version's (then that
version takes its values), an upsert with other values closes the open version at its sequence,
a delete closes it; __start_at / __end_at are those sequences.
"""
from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

import increments as inc

SCHEMA = "id BIGINT, name STRING, city STRING, op STRING, seq BIGINT"
COLS = ["id", "name", "city", "op", "seq"]


def ev(id: Any, name: Any, city: Any, op: str, seq: int) -> dict[str, Any]:
    return dict(zip(COLS, (id, name, city, op, seq)))


# The change set of Databricks' AUTO CDC documentation (userId, name, city, operation, sequenceNum).
DOCS = [ev(124, "Raul", "Oaxaca", "INSERT", 1), ev(123, "Isabel", "Monterrey", "INSERT", 1),
        ev(125, "Mercedes", "Tijuana", "INSERT", 2), ev(126, "Lily", "Cancun", "INSERT", 2),
        ev(123, None, None, "DELETE", 6), ev(125, "Mercedes", "Guadalajara", "UPDATE", 6),
        ev(125, "Mercedes", "Mexicali", "UPDATE", 5), ev(123, "Isabel", "Chihuahua", "UPDATE", 5)]
DOCS_SCD1 = [(124, "Raul", "Oaxaca"), (125, "Mercedes", "Guadalajara"), (126, "Lily", "Cancun")]
DOCS_SCD2 = [(123, "Isabel", "Monterrey", 1, 5), (123, "Isabel", "Chihuahua", 5, 6), (124, "Raul", "Oaxaca", 1, None),
             (125, "Mercedes", "Tijuana", 2, 5), (125, "Mercedes", "Mexicali", 5, 6),
             (125, "Mercedes", "Guadalajara", 6, None), (126, "Lily", "Cancun", 2, None)]
# TRACK HISTORY ON * EXCEPT (city): city changes update the current version in place
DOCS_SCD2_EXCEPT_CITY = [(123, "Isabel", "Chihuahua", 1, 6), (124, "Raul", "Oaxaca", 1, None),
                         (125, "Mercedes", "Guadalajara", 2, None), (126, "Lily", "Cancun", 2, None)]

APPLY = {"keys": ["id"], "sequence_by": "seq", "apply_as_deletes": "op = 'DELETE'", "except_columns": ["op", "seq"]}


class Target:
    """Where apply_changes writes: a Delta path or a PostgreSQL table; rows() reads it back."""

    def __init__(self, kind: str, tmp_path, pg_url: str | None = None):
        self.kind, self.pg_url = kind, pg_url
        self.name = f"cdc_{uuid.uuid4().hex[:10]}"
        self.path = str(tmp_path / self.name)

    def writer(self, w):
        if self.kind == "delta":
            return w.format("delta").option("table_properties", {"delta.enableChangeDataFeed": "true"})
        return w.format("postgres").option("url", self.pg_url).option("table", self.name)

    def start(self, w):
        return self.writer(w).start(self.path if self.kind == "delta" else None)

    def rows(self, scd: int = 1, cols: tuple[str, ...] = ("id", "name", "city")) -> list[tuple]:
        names = list(cols) + (["__start_at", "__end_at"] if scd == 2 else [])
        if self.kind == "delta":
            from increments.sinks.delta import read_table
            t, _ = read_table(self.path)
            got = [tuple(r[c] for c in names) for r in t.to_pylist()]
        else:
            eng = sa.create_engine(self.pg_url, poolclass=sa.pool.NullPool)
            with eng.connect() as c:
                if not sa.inspect(c).has_table(self.name):
                    return []
                q = ", ".join(f'"{c}"' for c in names)
                got = [tuple(r) for r in c.execute(sa.text(f'SELECT {q} FROM "{self.name}"')).all()]
            eng.dispose()
        return sorted(got, key=repr)


def run_batches(tmp_path, target: Target, batches: list[list[dict]], scd: int = 1, chk: str | None = None,
                frame=None, **apply: Any):
    """Each list of events one batch (memory source); returns the query (stopped)."""
    src = inc.read_stream.memory(SCHEMA)
    kw = {**APPLY, **apply}
    w = ((frame(src) if frame else src).write_stream.apply_changes(stored_as_scd_type=scd, **kw)
         .checkpoint_location(chk or str(tmp_path / f"chk_{uuid.uuid4().hex[:8]}"))
         .option("state_partitions", 2))
    q = target.start(w)
    try:
        for b in batches:
            src.add_data(b)
            q.process_all_available()
    finally:
        q.stop()
    if q.exception():
        raise q.exception()
    return q


# -- the reference model ------------------------------------------------------------------------------
def _sorted_changes(events: list[dict]) -> dict[Any, list[dict]]:
    by_key: dict[Any, dict[int, dict]] = {}
    for e in events:
        cur = by_key.setdefault(e["id"], {}).get(e["seq"])
        if cur is None or (e["op"] == "DELETE" and cur["op"] != "DELETE"):
            by_key[e["id"]][e["seq"]] = e
    return {k: [v[s] for s in sorted(v)] for k, v in by_key.items()}


def model_scd1(events: list[dict]) -> list[tuple]:
    out = []
    for k, changes in _sorted_changes(events).items():
        last = changes[-1]
        if last["op"] != "DELETE":
            out.append((k, last["name"], last["city"]))
    return sorted(out, key=repr)


def model_scd2(events: list[dict], tracked: tuple[str, ...] = ("name", "city")) -> list[tuple]:
    out = []
    for k, changes in _sorted_changes(events).items():
        cur = None
        for e in changes:
            if e["op"] == "DELETE":
                if cur is not None:
                    cur[4] = e["seq"]
                    out.append(tuple(cur))
                    cur = None
                continue
            if cur is not None and all(cur[1 + ("name", "city").index(c)] == e[c] for c in tracked):
                cur[1], cur[2] = e["name"], e["city"]
                continue
            if cur is not None:
                cur[4] = e["seq"]
                out.append(tuple(cur))
            cur = [k, e["name"], e["city"], e["seq"], None]
        if cur is not None:
            out.append(tuple(cur))
    return sorted(out, key=repr)

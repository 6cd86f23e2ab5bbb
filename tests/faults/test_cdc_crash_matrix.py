"""AUTO CDC: SIGKILL after each protocol step of batch 2, for SCD types 1 and 2 into Delta and
PostgreSQL; the restarted query's table equals a never-crashed run's and the documented result of
the whole change set, and no change was applied twice:
- Delta: the target's own change data feed (every row it ever wrote or deleted, with the version
  that did it) equals the uncrashed run's: a batch applied twice would add a commit and changes;
- PostgreSQL: an audit trigger on the target records every row inserted or deleted, in the
  batch's transaction: a batch applied twice would double its rows there.

The change files (one batch each) arrive out of order: late older updates, a delete before its
insert (a tombstone), a re-insert after a delete, exact duplicates, a NULL key.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest
import sqlalchemy as sa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "operators"))
from cdc_testutil import ev, model_scd1, model_scd2  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "cdc_query.py")
STEPS = ["plan", "read", "process", "write", "commit"]
FILES = [
    [ev(1, "Ann", "Oslo", "INSERT", 1), ev(2, "Bob", "Rome", "INSERT", 1), ev(3, "Cy", "Lima", "INSERT", 1),
     ev(4, None, None, "DELETE", 9)],
    [ev(1, "Ann", "Bern", "UPDATE", 5), ev(2, "Bob", "Pisa", "UPDATE", 3), ev(5, "Dee", "Kyiv", "INSERT", 2),
     ev(1, "Ann", "Bern", "UPDATE", 5)],
    [ev(1, "Ann", "Graz", "UPDATE", 3), ev(2, None, None, "DELETE", 7), ev(4, "Eve", "Nice", "INSERT", 4),
     ev(3, "Cy", "Cork", "UPDATE", 6)],
    [ev(2, "Bob", "Bari", "INSERT", 8), ev(None, "Nil", "Void", "INSERT", 1), ev(5, "Dee", "Kyiv", "UPDATE", 2)],
    [ev(None, "Nil", "Null", "UPDATE", 2), ev(3, "Cy", "Bray", "UPDATE", 4), ev(1, None, None, "DELETE", 10)],
]
EVENTS = [e for f in FILES for e in f]


def _write_input(d: str) -> str:
    os.makedirs(d, exist_ok=True)
    for i, rows in enumerate(FILES):
        with open(os.path.join(d, f"changes-{i:03d}.json"), "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
    return d


def _run(config: dict, expect_kill: bool = False) -> None:
    p = subprocess.run([sys.executable, SCRIPT, json.dumps(config)], capture_output=True, text=True, timeout=300)
    if expect_kill:
        assert p.returncode == -9, f"expected a SIGKILL, got {p.returncode}: {p.stderr[-2500:]}"
    else:
        assert p.returncode == 0, p.stderr[-3000:]


def _pg_prepare(pg_url: str, table: str, scd: int) -> None:
    """The target table, created ahead with an audit trigger (the sink keeps an existing table)."""
    extra = ", __start_at BIGINT, __end_at BIGINT" if scd == 2 else ""
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    with eng.begin() as c:
        c.execute(sa.text(f'CREATE TABLE "{table}" (id BIGINT, name TEXT, city TEXT{extra})'))
        c.execute(sa.text(f'CREATE TABLE "{table}_audit" (op TEXT, id BIGINT, name TEXT, city TEXT)'))
        c.execute(sa.text(f'''CREATE FUNCTION "{table}_f"() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF TG_OP = 'DELETE' THEN INSERT INTO "{table}_audit" VALUES ('D', OLD.id, OLD.name, OLD.city);
              ELSE INSERT INTO "{table}_audit" VALUES ('I', NEW.id, NEW.name, NEW.city); END IF;
              RETURN NULL;
            END $$'''))
        c.execute(sa.text(f'CREATE TRIGGER "{table}_t" AFTER INSERT OR DELETE ON "{table}" '
                          f'FOR EACH ROW EXECUTE FUNCTION "{table}_f"()'))
    eng.dispose()


def _result(sink: str, target: str, scd: int, pg_url: str) -> tuple[list, list]:
    """(the table's rows, what was applied to it: its change feed or its audit rows), sorted."""
    names = ["id", "name", "city"] + (["__start_at", "__end_at"] if scd == 2 else [])
    if sink == "delta":
        from deltalake import DeltaTable

        from increments.sinks.delta import read_table
        t, _ = read_table(target)
        feed = pa.table(DeltaTable(target).load_cdf(starting_version=0).read_all()).to_pylist()
        applied = [tuple(r[c] for c in names + ["_change_type", "_commit_version"]) for r in feed]
        rows = [tuple(r[c] for c in names) for r in t.to_pylist()]
    else:
        eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
        with eng.connect() as c:
            rows = [tuple(r) for r in c.execute(sa.text(
                "SELECT " + ", ".join(f'"{n}"' for n in names) + f' FROM "{target}"')).all()]
            applied = [tuple(r) for r in c.execute(sa.text(f'SELECT * FROM "{target}_audit"')).all()]
        eng.dispose()
    return sorted(rows, key=repr), sorted(applied, key=repr)


@pytest.mark.faults
@pytest.mark.parametrize("sink,scd,state_store", [("delta", 1, "rocksdb"), ("delta", 2, "rocksdb"),
                                                  ("postgres", 1, "rocksdb"), ("postgres", 2, "rocksdb"),
                                                  ("delta", 2, "memory")])
def test_kill_at_every_step_applies_each_change_once(tmp_path, pg_url, sink, scd, state_store):
    base = {"input": _write_input(str(tmp_path / "in")), "sink": sink, "scd": scd, "pg_url": pg_url,
            "state_store": state_store}

    def target(tag: str) -> str:
        if sink == "delta":
            return str(tmp_path / f"out_{tag}")
        name = f"cdc_{tag}_{uuid.uuid4().hex[:8]}"
        _pg_prepare(pg_url, name, scd)
        return name
    clean = dict(base, checkpoint=str(tmp_path / "chk_clean"), target=target("clean"))
    _run(clean)
    rows, applied = _result(sink, clean["target"], scd, pg_url)
    model = model_scd1(EVENTS) if scd == 1 else model_scd2(EVENTS)
    assert rows == model, "the uncrashed run must give the documented table"
    for step in STEPS:
        cfg = dict(base, checkpoint=str(tmp_path / f"chk_{step}"), target=target(step), crash_batch=2,
                   crash_step=step)
        _run(cfg, expect_kill=True)
        cfg.pop("crash_step")
        _run(cfg)
        got_rows, got_applied = _result(sink, cfg["target"], scd, pg_url)
        assert got_rows == rows, f"{sink}/scd{scd}: table after a kill after {step} of batch 2 differs"
        assert got_applied == applied, f"{sink}/scd{scd}: a change was applied twice (kill after {step})"

"""SIGKILL at each protocol step, for each sink and each state provider; the restarted query's
output equals a never-crashed run's, row for row (each row exactly once).

Points: after plan (offsets[N] written), after read, after process (state version N committed),
after write (the sink holds batch N, commits[N] missing), after commit (commits[N] written).
A kill *inside* the sink is covered by the foreach_batch pattern and the sinks' own tests.

Object-store column: input, checkpoint and Delta sink on S3 (moto's server), the log in
PostgreSQL; the restart after each kill runs on another "machine" (a fresh working directory and
TMPDIR: no local cache survives), and the output equals the uncrashed run on local disk.
"""
from __future__ import annotations

import uuid

import pytest

from fault_testutil import run_query, sink_rows, upload_dir

STEPS = ["plan", "read", "process", "write", "commit"]
SINKS = ["delta", "postgres", "parquet", "iceberg", "foreach_batch"]


def _target(sink, root, tag):
    if sink == "iceberg":
        return f"faults.out_{tag}_{uuid.uuid4().hex[:8]}"
    return f"faults_{tag}_{uuid.uuid4().hex[:8]}" if sink == "postgres" else str(root / f"out_{tag}")


@pytest.mark.faults
@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
@pytest.mark.parametrize("sink", SINKS)
def test_kill_at_every_step_gives_the_uncrashed_output(fault_env, sink, state_store):
    root = fault_env["root"]
    catalog = {"type": "sql", "uri": fault_env["pg_url"], "warehouse": f"file://{root}/warehouse"}
    base = {"input": fault_env["input"], "sink": sink, "pg_url": fault_env["pg_url"], "state_store": state_store,
            "catalog": catalog}
    clean = dict(base, checkpoint=str(root / "chk_clean"), target=_target(sink, root, "clean"))
    run_query(clean)
    expected = sink_rows(sink, clean["target"], fault_env["pg_url"], catalog)
    assert len(expected) >= 6, "the workload must close several windows"
    for step in STEPS:
        cfg = dict(base, checkpoint=str(root / f"chk_{step}"), target=_target(sink, root, step),
                   crash_batch=2, crash_step=step)
        run_query(cfg, expect_kill=True)
        cfg.pop("crash_step")
        run_query(cfg)
        got = sink_rows(sink, cfg["target"], fault_env["pg_url"], catalog)
        assert got == expected, f"{sink}/{state_store}: output after a kill after {step} of batch 2 differs"


@pytest.mark.faults
@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_object_store_kill_at_every_step_gives_the_local_output(fault_env, s3_bucket, state_store):
    root, pg_url = fault_env["root"], fault_env["pg_url"]
    local = {"input": fault_env["input"], "sink": "delta", "state_store": state_store,
             "checkpoint": str(root / "chk_local"), "target": str(root / "out_local")}
    run_query(local)
    expected = sink_rows("delta", local["target"])
    assert len(expected) >= 6, "the workload must close several windows"
    upload_dir(fault_env["input"], f"{s3_bucket}/in")
    base = {"input": f"{s3_bucket}/in", "sink": "delta", "state_store": state_store, "log_url": pg_url}
    for step in STEPS:
        cfg = dict(base, checkpoint=f"{s3_bucket}/chk_{step}", target=f"{s3_bucket}/out_{step}",
                   crash_batch=2, crash_step=step)
        run_query(cfg, expect_kill=True, machine=str(root / f"{step}_first"))
        cfg.pop("crash_step")
        run_query(cfg, machine=str(root / f"{step}_restart"))
        got = sink_rows("delta", cfg["target"])
        assert got == expected, f"S3/{state_store}: output after a kill after {step} of batch 2 differs"

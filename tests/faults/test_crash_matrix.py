"""SIGKILL at each protocol step, for each sink and each state provider; the restarted query's
output equals a never-crashed run's, row for row (each row exactly once).

Points: after plan (offsets[N] written), after read, after process (state version N committed),
after write (the sink holds batch N, commits[N] missing), after commit (commits[N] written).
A kill *inside* the sink is covered by the foreach_batch pattern and the sinks' own tests.
"""
from __future__ import annotations

import uuid

import pytest

from faultkit import run_query, sink_rows

STEPS = ["plan", "read", "process", "write", "commit"]
SINKS = ["delta", "postgres", "parquet", "foreach_batch"]


def _target(sink, root, tag):
    return f"faults_{tag}_{uuid.uuid4().hex[:8]}" if sink == "postgres" else str(root / f"out_{tag}")


@pytest.mark.faults
@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
@pytest.mark.parametrize("sink", SINKS)
def test_kill_at_every_step_gives_the_uncrashed_output(fault_env, sink, state_store):
    root = fault_env["root"]
    base = {"input": fault_env["input"], "sink": sink, "pg_url": fault_env["pg_url"], "state_store": state_store}
    clean = dict(base, checkpoint=str(root / "chk_clean"), target=_target(sink, root, "clean"))
    run_query(clean)
    expected = sink_rows(sink, clean["target"], fault_env["pg_url"])
    assert len(expected) >= 6, "the workload must close several windows"
    for step in STEPS:
        cfg = dict(base, checkpoint=str(root / f"chk_{step}"), target=_target(sink, root, step),
                   crash_batch=2, crash_step=step)
        run_query(cfg, expect_kill=True)
        cfg.pop("crash_step")
        run_query(cfg)
        got = sink_rows(sink, cfg["target"], fault_env["pg_url"])
        assert got == expected, f"{sink}/{state_store}: output after a kill after {step} of batch 2 differs"

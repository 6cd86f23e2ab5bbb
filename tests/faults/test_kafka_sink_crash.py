"""The Kafka sink's crash matrix: SIGKILL after each protocol step of batch 2, and inside its Kafka
transaction (after the first record, with the whole batch in an open transaction, during
commit_transaction, right after it); the restarted query's topic, read with
isolation.level=read_committed, holds exactly the records of a never-crashed run: each once."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from broker import create_topic
from kafka_testutil import read_committed

SCRIPT = os.path.join(os.path.dirname(__file__), "kafka_sink_query.py")
STEPS = ["plan", "read", "process", "write", "commit"]
INSIDE = ["first_record", "before_commit", "in_commit:0", "in_commit:3", "in_commit:30", "after_commit"]


def _run(config: dict, expect_kill: bool = False) -> None:
    p = subprocess.run([sys.executable, SCRIPT, json.dumps(config)], capture_output=True, text=True, timeout=300)
    if expect_kill:
        assert p.returncode == -9, f"expected a SIGKILL, got {p.returncode}: {p.stderr[-2500:]}"
    else:
        assert p.returncode == 0, p.stderr[-3000:]


@pytest.mark.faults
@pytest.mark.kafka
def test_kill_after_every_step_and_inside_the_transaction_gives_each_record_once(fault_env, kafka_txn_broker):
    root, bs = fault_env["root"], kafka_txn_broker
    base = {"input": fault_env["input"], "bootstrap": bs}
    clean = dict(base, checkpoint=str(root / "chk_clean"), topic=create_topic(bs, partitions=2))
    _run(clean)
    expected = read_committed(bs, clean["topic"], 2)
    assert len(expected) >= 6, "the workload must close several windows"
    points = [("crash_step", s) for s in STEPS] + [("kafka_point", p) for p in INSIDE]
    for kind, point in points:
        tag = point.replace(":", "_")
        cfg = dict(base, checkpoint=str(root / f"chk_{tag}"), topic=create_topic(bs, partitions=2), crash_batch=2,
                   **{kind: point})
        _run(cfg, expect_kill=True)
        cfg.pop(kind)
        _run(cfg)
        got = read_committed(bs, cfg["topic"], 2)
        assert got == expected, f"after a kill at {point} of batch 2 the topic differs from the uncrashed run"

"""transform_with_state's next processing-time timer lives in the commit row
(commits[N].extra["next_timers"]), so the plan of any process (a Dagster op on another machine)
knows when a no-data batch is due; a checkpoint whose last commit came from an earlier release
(timer in the state/<op>/_next_timer.json sidecar) is still honoured."""
from __future__ import annotations

import json
import time

import pytest
import sqlalchemy as sa

import increments as inc
from increments.execution import steps


class Reminder(inc.StatefulProcessor):
    def init(self, handle):
        self.h = handle

    def handle_input_rows(self, key, rows, tv):
        self.h.register_timer(tv.get_current_processing_time_in_ms() + 300)
        yield {"k": key[0], "what": "got"}

    def handle_expired_timer(self, key, tv, info):
        yield {"k": key[0], "what": "remind"}


def _runtime(tmp_path, out):
    src = inc.read_stream.memory("k STRING")
    frame = src.group_by("k").transform_with_state(Reminder(), "k STRING, what STRING",
                                                   time_mode="processing_time", output_mode="update")
    w = (frame.write_stream.output_mode("update").foreach_batch(lambda t, b: out.append(t.to_pylist()))
         .checkpoint_location(str(tmp_path / "chk")).option("state_store", "memory").option("state_partitions", 2))
    return src, w.build()


@pytest.mark.parametrize("legacy", [False, True])
def test_a_due_timer_runs_a_no_data_batch_from_the_commit_row(tmp_path, legacy):
    out: list = []
    src, rt = _runtime(tmp_path, out)
    try:
        src.add_data([("a",), ("b",)])
        steps.run_one_batch(rt)
        commit = rt.log.get_commit(0)
        (timer,) = set(commit.extra["next_timers"].values())
        assert timer is not None
        assert not any(o.name.endswith("_next_timer.json") for o in rt.state.checkpoint.list("state/"))
        if legacy:   # as an earlier release left it: no next_timers in the row, the timer in a sidecar
            body = commit.body()
            body["extra"] = {k: v for k, v in commit.extra.items() if k != "next_timers"}
            t = rt.log.commits.table
            with rt.log.engine.begin() as c:
                c.execute(t.update().where(t.c.query_id == rt.query_id, t.c.batch_id == 0)
                          .values(body=json.dumps(body, sort_keys=True)))
            op_id = next(iter(commit.extra["next_timers"]))
            rt.state.checkpoint.write_json(f"state/{op_id}/_next_timer.json",
                                           {"batch_id": 0, "next_processing_timer_ms": timer})
        while time.time() * 1000 <= timer:
            time.sleep(0.05)
        assert steps.run_one_batch(rt) is not None          # the timer batch
        assert sorted(r["what"] for r in out[-1]) == ["remind", "remind"]
        assert steps.run_one_batch(rt) is None              # no timer left: idle
    finally:
        rt.close()

"""The protocol's steps in separate runtimes, as Dagster ops run them (one process per op): data
between steps is staged under the checkpoint (staging/<N>/<run id>/), state tokens come from the
log, and a stale run is refused. On local disk (SQLite log) and on S3 (PostgreSQL log); the output
equals the local runner's.
"""
from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

import increments as inc
from increments import functions as F
from increments import storage
from increments.errors import ConcurrentRunError
from increments.execution import steps


def _put_inputs(url: str) -> None:
    loc = storage.location(url)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for f in range(5):
        lines = [json.dumps({"campaign_id": f"c{i % 3}", "event_time": (t0 + dt.timedelta(minutes=f * 12 + i))
                             .isoformat().replace("+00:00", "Z")}) for i in range(12)]
        loc.write_bytes(f"clicks-{f:03d}.json", ("\n".join(lines) + "\n").encode())


def _writer(input_url: str, checkpoint: str, out: dict, log_url: str | None):
    def collect(table, batch_id):
        out[batch_id] = sorted((r["window"]["start"].isoformat(), r["campaign_id"], r["count"])
                               for r in table.to_pylist())
    w = (inc.read_stream.files(input_url, "json", "campaign_id STRING, event_time TIMESTAMP", max_files_per_trigger=1)
         .with_watermark("event_time", "5 minutes").group_by(F.window("event_time", "10 minutes"), "campaign_id")
         .count().write_stream.foreach_batch(collect).output_mode("append").checkpoint_location(checkpoint)
         .query_name("split").option("state_partitions", 2).trigger(available_now=True))
    return w.option("log_url", log_url) if log_url else w


def _step_runtime(writer, run_id):
    rt = writer.build(staging="disk")
    rt.run_id = run_id
    return rt


@pytest.mark.parametrize("where", ["disk", "s3"])
def test_steps_in_separate_runtimes_match_the_local_runner(tmp_path, request, where):
    if where == "s3":
        bucket, log_url = request.getfixturevalue("s3_bucket"), request.getfixturevalue("pg_url")
        input_url, chk = f"{bucket}/in", f"{bucket}/chk"
    else:
        input_url, chk, log_url = str(tmp_path / "in"), str(tmp_path / "chk"), None
    _put_inputs(input_url)
    expected: dict = {}
    _writer(input_url, str(tmp_path / "reference_chk"), expected, None).start().await_termination()

    got: dict = {}
    writer = _writer(input_url, chk, got, log_url)
    batches = 0
    while True:
        run_id = uuid.uuid4().hex
        rt = _step_runtime(writer, run_id)
        plan = steps.plan_batch(rt)
        if plan is None:
            rt.close()
            break
        rt.staging.put_json(plan.batch_id, "plan", plan.durations_ms)
        rt.close()
        n = plan.batch_id
        for fn in (steps.read_batch, steps.process_batch, steps.write_batch):
            rt = _step_runtime(writer, run_id)
            fn(rt, steps.load_plan(rt, n))
            rt.close()
        staged = storage.location(chk).child("staging")
        names = {o.name for o in staged.list()}
        assert {f"{n}/{run_id}/{x}" for x in ("plan.json", "read.json", "input_0.arrow", "process.json",
                                               "output.arrow", "write.json")} == names
        stale = _step_runtime(writer, uuid.uuid4().hex)       # a stale run asking for the same batch
        with pytest.raises(ConcurrentRunError, match="owned by run"):
            steps.load_plan(stale, n)
        stale.close()
        rt = _step_runtime(writer, run_id)
        entry, _ = steps.commit_batch(rt, steps.load_plan(rt, n))
        if rt.plan.stateful_ops:
            assert len(entry.extra["state_tokens"]["0"]) == 2
        assert not [o.name for o in staged.list() if int(o.name.split("/")[0]) <= n], "staging of N is cleared"
        rt.close()
        batches += 1
    assert batches == len(expected) and got == expected

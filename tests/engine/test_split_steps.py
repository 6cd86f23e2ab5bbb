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


# The step results as an earlier release staged them (dicts, recorded from its steps on a file
# source with a windowed count over 2 state partitions): a batch whose first steps ran before an
# upgrade is finished by this release, and the other way round.
EARLIER_READ = {"get_batch_ms": 105, "sources": [{"changed_files": [], "files": 1, "num_input_rows": 6,
                                                  "skipped_files": []}]}
EARLIER_PROCESS = {
    "dead_letters": {"1": 2}, "event_time": {"0": {"count": 6, "max_ms": 1767225900000, "min_ms": 1767225600000,
                                                   "sum_ms": 10603354500000}},
    "next_timers": {}, "partitions": [{"num_input_rows": 3, "num_output_rows": 0, "num_state_rows": 1, "partition": 0,
                                       "process_ms": 297}],
    "process_ms": 336, "state_operators": [{"memory_used_bytes": 4174, "num_partitions": 2,
                                            "num_rows_dropped_by_watermark": 0, "num_rows_removed": 0,
                                            "num_rows_total": 2, "num_rows_updated": 2, "operator_id": "0",
                                            "operator_name": "stateStoreSave"}],
    "state_tokens": {}, "state_versions": {}, "static_versions": {"dim": 3}, "warnings": ["w1"]}
EARLIER_WRITE = {"add_batch_ms": 55, "num_output_rows": 4, "sink_version": 7, "skipped_replay": False,
                 "files_added": 2}
EARLIER_SPLIT = {"custom_metrics": {}, "dead_letters": {}, "dropped_by_watermark": {"0": 1},
                 "event_time": {"0": {"count": 6, "max_ms": 1767225900000, "min_ms": 1767225600000,
                                      "sum_ms": 10603354500000}},
                 "partitions": 2, "rows": [3, 3], "split_ms": 39, "static_versions": {}, "warnings": []}
EARLIER_PARTITION = {"custom_metrics": {}, "dead_letters": {}, "dropped_by_watermark": {}, "event_time": {},
                     "num_input_rows": 3, "num_output_rows": 0, "num_state_rows": 1, "partition": 1, "process_ms": 84,
                     "state_operators": [], "state_tokens": {"0": [None, "3226972bf84b44278565d500a4b7971f-1"]},
                     "state_versions": {"0": 0}, "static_versions": {}, "warnings": []}


def test_step_results_keep_the_json_an_earlier_release_staged():
    from increments.execution import step_results as r
    for cls, body in ((r.ReadResult, EARLIER_READ), (r.ProcessResult, EARLIER_PROCESS), (r.WriteResult, EARLIER_WRITE),
                      (r.SplitResult, EARLIER_SPLIT), (r.PartitionResult, EARLIER_PARTITION)):
        assert cls.from_json(json.loads(json.dumps(body))).to_json() == body, cls.__name__
    read = r.ReadResult.from_json(EARLIER_READ)
    assert read.num_input_rows == 6 and read.sources[0].metrics == {"changed_files": [], "files": 1, "skipped_files": []}
    write = r.WriteResult.from_json(EARLIER_WRITE)
    assert (write.num_output_rows, write.sink_version, write.extra) == (4, 7, {"files_added": 2})
    assert r.SplitResult.from_json(EARLIER_SPLIT).metrics.dropped_by_watermark == {"0": 1}
    stateless = {"partitions": 2, "rows": [1, 0], "stateless": True, "split_ms": 3}
    assert r.SplitResult.from_json(stateless).to_json() == stateless


def test_commit_finishes_a_batch_whose_steps_an_earlier_release_staged(tmp_path):
    """read, process and write staged in the earlier layout (a resumed run after an upgrade): commit
    records them in commits[N] and the progress report as the earlier release did."""
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(6)))
    writer = (inc.read_stream.files(str(d), "json", "id BIGINT").select("id").write_stream
              .foreach_batch(lambda t, b: None).checkpoint_location(str(tmp_path / "chk")).query_name("upgrade")
              .trigger(available_now=True))
    rt = _step_runtime(writer, uuid.uuid4().hex)
    plan = steps.plan_batch(rt)
    for name, body in (("read", EARLIER_READ), ("process", EARLIER_PROCESS), ("write", EARLIER_WRITE)):
        rt.staging.put_json(plan.batch_id, name, body)
    entry, progress = steps.commit_batch(rt, plan)
    rt.close()
    assert (entry.num_input_rows, entry.num_output_rows, entry.sink_version) == (6, 4, 7)
    assert entry.extra["sources"] == EARLIER_READ["sources"]
    assert entry.extra["dead_letters"] == {"1": 2} and entry.extra["static_versions"] == {"dim": 3}
    assert entry.extra["state_operators"] == EARLIER_PROCESS["state_operators"]
    assert entry.extra["warnings"] == ["w1"] and entry.event_time == EARLIER_PROCESS["event_time"]
    assert entry.durations_ms["get_batch"] == 105 and entry.durations_ms["add_batch"] == 336 + 55
    src = progress["sources"][0]
    assert (src["num_input_rows"], src["files"], src["skipped_files"]) == (6, 1, [])
    assert progress["num_input_rows"] == 6 and progress["sink"]["num_output_rows"] == 4
    assert progress["state_operators"] == EARLIER_PROCESS["state_operators"]
    assert progress["dead_letters"] == {"1": 2} and progress["warnings"] == ["w1"]

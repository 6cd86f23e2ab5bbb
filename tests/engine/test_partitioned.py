"""The process step fanned out per state partition (execution/partitioned.py), each step and each
partition in its own runtime, as Dagster ops on separate workers run them: the output and the
committed state equal the local runner's (windowed aggregation, global-key aggregation in update
mode, dedup) and a stateless plan's row-range slices; plans that cannot fan out say why."""
from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

import increments as inc
from increments import functions as F
from increments import storage
from increments.execution import partitioned, steps

PARTS = 3


def _put_inputs(url: str) -> None:
    loc = storage.location(url)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for f in range(5):
        lines = [json.dumps({"campaign_id": f"c{i % 5}", "user_id": f"u{(i * 7 + f) % 9}",
                             "event_time": (t0 + dt.timedelta(minutes=f * 12 + i)).isoformat().replace("+00:00", "Z")})
                 for i in range(12)]
        loc.write_bytes(f"clicks-{f:03d}.json", ("\n".join(lines) + "\n").encode())


def _frame(input_url: str, kind: str):
    f = inc.read_stream.files(input_url, "json", "campaign_id STRING, user_id STRING, event_time TIMESTAMP",
                              max_files_per_trigger=1)
    if kind == "window":
        return f.with_watermark("event_time", "5 minutes").group_by(
            F.window("event_time", "10 minutes"), "campaign_id").count(), "append"
    if kind == "update":
        return f.filter("campaign_id <> 'c4'").group_by("campaign_id").count(), "update"
    if kind == "dedup":
        return f.drop_duplicates(["user_id"]), "append"
    if kind == "stateless":
        return f.with_watermark("event_time", "5 minutes").filter("campaign_id <> 'c4'") \
            .select("user_id", "event_time"), "append"
    if kind == "expect_stateless":
        return f.expect("not_c4", "campaign_id <> 'c4'").expect_or_drop("not_u3", "user_id <> 'u3'"), "append"
    if kind == "expect_window":
        return (f.expect_or_drop("not_u3", "user_id <> 'u3'").with_watermark("event_time", "5 minutes")
                .group_by(F.window("event_time", "10 minutes"), "campaign_id").count()
                .expect("single", "count < 2")), "append"
    if kind == "udf_window":       # a UDF key and a pandas-free arrow UDF filter, fanned out like SQL steps
        short = F.udf(lambda c: c[:2], "string")
        return (f.filter(F.arrow_udf(_not_u3, "boolean")("user_id")).with_watermark("event_time", "5 minutes")
                .group_by(F.window("event_time", "10 minutes"), short("campaign_id")).count()), "append"
    if kind == "map_stateless":
        return f.map_in_arrow(_first_two_columns, "campaign_id STRING, user_id STRING"), "append"
    raise ValueError(kind)


def _not_u3(users):
    import pyarrow.compute as pc
    return pc.not_equal(users, "u3")


def _first_two_columns(batches):
    for b in batches:
        yield b.select(["campaign_id", "user_id"])


def _writer(input_url: str, checkpoint: str, kind: str, out: dict, log_url: str | None = None):
    def collect(table, batch_id):
        out[batch_id] = sorted(json.dumps(r, default=str, sort_keys=True) for r in table.to_pylist())
    frame, mode = _frame(input_url, kind)
    w = (frame.write_stream.foreach_batch(collect).output_mode(mode).checkpoint_location(checkpoint)
         .query_name(f"fan_{kind}").option("state_partitions", PARTS).trigger(available_now=True))
    return w.option("log_url", log_url) if log_url else w


def _runtime(writer, run_id):
    rt = writer.build(staging="disk")
    rt.run_id = run_id
    return rt


def _run_fanned_out(writer) -> int:
    batches = 0
    while True:
        run_id = uuid.uuid4().hex
        rt = _runtime(writer, run_id)
        assert partitioned.fanout_reason(rt.plan) is None
        plan = steps.plan_batch(rt)
        if plan is None:
            rt.close()
            return batches
        rt.staging.put_json(plan.batch_id, "plan", plan.durations_ms)
        rt.close()
        n = plan.batch_id
        rt = _runtime(writer, run_id)
        steps.read_batch(rt, steps.load_plan(rt, n))
        split = partitioned.split_batch(rt, steps.load_plan(rt, n))
        rt.close()
        for p in reversed(range(PARTS)):                     # any order, each in its own runtime
            rt = _runtime(writer, run_id)
            part = partitioned.process_partition(rt, steps.load_plan(rt, n), p)
            assert part.num_input_rows == split.rows[p]       # the rows of its slice (of each input, stateless)
            rt.close()
        rt = _runtime(writer, run_id)
        joined = partitioned.join_partitions(rt, steps.load_plan(rt, n))
        assert [x["num_input_rows"] for x in joined.partitions] == split.rows
        rt.close()
        rt = _runtime(writer, run_id)
        steps.write_batch(rt, steps.load_plan(rt, n))
        rt.close()
        rt = _runtime(writer, run_id)
        entry, _ = steps.commit_batch(rt, steps.load_plan(rt, n))
        tokens = entry.extra["state_tokens"]
        assert all(len(ts) == PARTS and all(ts) for ts in tokens.values())
        assert bool(tokens) == bool(rt.plan.stateful_ops)
        rt.close()
        batches += 1


@pytest.mark.parametrize("kind", ["window", "update", "dedup", "stateless", "udf_window", "map_stateless"])
def test_fanned_out_batches_match_the_local_runner(tmp_path, kind):
    input_url = str(tmp_path / "in")
    _put_inputs(input_url)
    expected: dict = {}
    ref = _writer(input_url, str(tmp_path / "ref"), kind, expected).start()
    ref.await_termination()
    ref_state = [r["num_rows_total"] for r in ref.last_progress["state_operators"]]
    got: dict = {}
    writer = _writer(input_url, str(tmp_path / "chk"), kind, got)
    assert _run_fanned_out(writer) == len(expected)
    assert got == expected
    # the fanned-out checkpoint goes on with the local runner: its state is the whole state
    q = writer.start()
    q.await_termination()
    assert q.last_progress is None or [r["num_rows_total"] for r in q.last_progress["state_operators"]] == ref_state


def test_fanout_on_s3_with_postgres_log(tmp_path, s3_bucket, pg_url):
    input_url, chk = f"{s3_bucket}/in", f"{s3_bucket}/chk"
    _put_inputs(input_url)
    expected: dict = {}
    _writer(input_url, str(tmp_path / "ref"), "window", expected).start().await_termination()
    got: dict = {}
    assert _run_fanned_out(_writer(input_url, chk, "window", got, pg_url)) == len(expected)
    assert got == expected


def test_plans_that_cannot_fan_out_say_why(tmp_path):
    f = inc.read_stream.files(str(tmp_path), "json", "k STRING, event_time TIMESTAMP")

    def reason(frame, mode="append"):
        rt = frame.write_stream.format("memory").output_mode(mode).query_name(f"r{uuid.uuid4().hex[:6]}") \
            .checkpoint_location(str(tmp_path / uuid.uuid4().hex)).build()
        try:
            return partitioned.fanout_reason(rt.plan)
        finally:
            rt.close()
    wm = f.with_watermark("event_time", "1 minute")
    assert reason(f.filter("k <> 'x'")) is None                # row-range slices
    assert "sliding" in reason(wm.group_by(F.window("event_time", "10 minutes", "5 minutes"), "k").count())
    assert "chained" in reason(wm.drop_duplicates(["k", "event_time"]).group_by(
        F.window("event_time", "10 minutes"), "k").count())
    g = inc.read_stream.files(str(tmp_path), "json", "k STRING, t2 TIMESTAMP").with_watermark("t2", "1 minute")
    assert reason(wm.join(g, on="k")) is not None
    assert reason(wm.group_by(F.window("event_time", "10 minutes"), "k").count()) is None
    raw = inc.read_stream.files(str(tmp_path), "json", "value STRING")
    dl = inc.dead_letter.delta(str(tmp_path / "dead"))
    parsed = raw.parse_json("k STRING, event_time TIMESTAMP", dead_letter=dl)
    assert "dead-letter table once per batch" in reason(parsed)                 # stateless: once per op
    assert reason(parsed.with_watermark("event_time", "1 minute").group_by(  # below the stateful op: in split
        F.window("event_time", "10 minutes"), "k").count()) is None


@pytest.mark.parametrize("kind", ["expect_stateless", "expect_window"])
def test_fanned_out_expectation_counts_match_the_local_runner(tmp_path, kind):
    """Expectations below the stateful operator run once (in split), above it once per partition:
    commits[N] holds the counts summed over the partitions, as the local runner counts them."""
    from increments.checkpoint.log import open_log
    input_url = str(tmp_path / "in")
    _put_inputs(input_url)
    expected: dict = {}
    ref = _writer(input_url, str(tmp_path / "ref"), kind, expected).start()
    ref.await_termination()
    want = [p["expectations"] for p in ref.recent_progress]
    got: dict = {}
    chk = str(tmp_path / "chk")
    assert _run_fanned_out(_writer(input_url, chk, kind, got)) == len(expected)
    assert got == expected
    meta = json.load(open(f"{chk}/metadata.json"))
    log = open_log(None, chk, meta["id"])
    assert [log.get_commit(n).extra["expectations"] for n in range(len(want))] == want
    assert any(e["failed"] for batch in want for e in batch)


@pytest.mark.parametrize("scd", [1, 2])
def test_fanned_out_apply_changes_gives_the_local_table(tmp_path, scd):
    """AUTO CDC fanned out by key: each partition op sequences its keys' changes (and tombstones)
    alone; the table equals the local runner's."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "operators"))
    from cdc_testutil import DOCS, ev
    from increments.sinks.delta import read_table
    files = [DOCS[:4] + [ev(9, None, None, "DELETE", 7)], list(reversed(DOCS[4:])) + [ev(9, "Zed", "Oslo", "INSERT", 3)]]
    loc = storage.location(str(tmp_path / "in"))
    for i, rows in enumerate(files):
        loc.write_bytes(f"c-{i}.json", "".join(json.dumps(r) + "\n" for r in rows).encode())

    def writer(name):
        return (inc.read_stream.files(str(tmp_path / "in"), "json", "id BIGINT, name STRING, city STRING, op STRING, "
                                      "seq BIGINT", max_files_per_trigger=1)
                .write_stream.apply_changes(["id"], "seq", "op = 'DELETE'", ["op", "seq"], scd).format("delta")
                .option("path", str(tmp_path / name)).checkpoint_location(str(tmp_path / f"chk_{name}"))
                .query_name(f"fan_cdc_{name}").option("state_partitions", PARTS).trigger(available_now=True))
    writer("ref").start().await_termination()
    assert _run_fanned_out(writer("fan")) == 2

    def rows(name):
        t, _ = read_table(str(tmp_path / name))
        return sorted((tuple(r.values()) for r in t.to_pylist()), key=repr)
    assert rows("fan") == rows("ref") and rows("ref")

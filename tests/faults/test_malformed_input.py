"""Malformed input against a stateful query: clear errors naming file and line, or visible
handling; the query's state and output stay intact."""
from __future__ import annotations

import json
import os

import pytest

import increments as inc
from increments import functions as F

SCHEMA = "campaign_id STRING, event_time TIMESTAMP"


def _start(inp, chk, out):
    def sink(t, b):
        out.setdefault(b, []).extend(sorted((r["window"]["start"].isoformat(), r["campaign_id"], r["count"])
                                            for r in t.to_pylist()))
    return (inc.read_stream.files(inp, "json", SCHEMA, max_files_per_trigger=1)
            .with_watermark("event_time", "5 minutes")
            .group_by(F.window("event_time", "10 minutes"), "campaign_id").count()
            .write_stream.output_mode("append").foreach_batch(sink).checkpoint_location(chk)
            .trigger(available_now=True).start())


def _write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def _ev(c, t):
    return {"campaign_id": c, "event_time": t}


@pytest.mark.faults
@pytest.mark.parametrize("bad,where", [
    ('{"campaign_id": "c1", "event_time": "2026-01-01T00:01:00Z"', "line 2: invalid JSON"),
    ('{"campaign_id": "c1", "event_time": "yesterday"}', "line 2: field 'event_time'"),
    ('[1, 2, 3]', "line 2: not a JSON object"),
])
def test_bad_rows_fail_the_batch_and_state_survives(tmp_path, bad, where):
    inp, chk, out = str(tmp_path / "in"), str(tmp_path / "chk"), {}
    os.makedirs(inp)
    _write(f"{inp}/a.json", [_ev("c1", "2026-01-01T00:01:00Z"), _ev("c1", "2026-01-01T00:02:00Z")])
    _write(f"{inp}/b.json", [_ev("c1", "2026-01-01T00:03:00Z"), bad])
    q = _start(inp, chk, out)
    with pytest.raises(inc.StreamingQueryException, match=where) as ei:
        q.await_termination()
    assert "b.json" in str(ei.value) and "batch 1" in str(ei.value)
    state = inc.read_state(chk, operator="0")
    assert state.num_rows == 1 and state.column("count").to_pylist() == [2]   # batch 0's state is intact
    _write(f"{inp}/b.json", [_ev("c1", "2026-01-01T00:03:00Z"), _ev("c2", "2026-01-01T00:30:00Z")])
    _start(inp, chk, out).await_termination()
    emitted = [row for b in sorted(out) for row in out[b]]
    # the window closed by the trailing batch holds all three c1 clicks: none lost, none doubled
    assert emitted == [("2026-01-01T00:00:00+00:00", "c1", 3)]


@pytest.mark.faults
def test_null_event_times_do_not_move_the_watermark_and_are_reported(tmp_path):
    inp, chk, out = str(tmp_path / "in"), str(tmp_path / "chk"), {}
    os.makedirs(inp)
    _write(f"{inp}/a.json", [_ev("c1", "2026-01-01T00:01:00Z"), {"campaign_id": "c1", "event_time": None}])
    q = _start(inp, chk, out)
    q.await_termination()
    first = q.recent_progress[0]
    assert first["event_time"]["max"] == "2026-01-01T00:01:00.000Z"
    assert any("null 'event_time'" in w for w in first["warnings"])


@pytest.mark.faults
def test_far_future_event_time_is_visible_not_silent(tmp_path):
    inp, chk, out = str(tmp_path / "in"), str(tmp_path / "chk"), {}
    os.makedirs(inp)
    _write(f"{inp}/a.json", [_ev("c1", "2026-01-01T00:01:00Z"), _ev("c2", "2026-01-01T00:12:00Z")])
    _write(f"{inp}/b.json", [_ev("c3", "2999-01-01T00:00:00Z")])
    _write(f"{inp}/c.json", [_ev("c1", "2026-01-01T00:13:00Z")])
    q = _start(inp, chk, out)
    q.await_termination()
    by_batch = {p["batch_id"]: p for p in q.recent_progress}
    jump = by_batch[1]
    assert any("ahead of the batch's processing time" in w and "by more than a day" in w for w in jump["warnings"])
    assert jump["event_time"]["max"] == "2999-01-01T00:00:00.000Z"
    # the next batch runs with the jumped watermark: the open windows are emitted and evicted, visibly
    after = by_batch[2]
    assert after["event_time"]["watermark"] == "2998-12-31T23:55:00.000Z"
    assert after["state_operators"][0]["num_rows_removed"] >= 1
    # (the 00:13 row is judged by the previous watermark, 00:07, so it is still accepted, rule 4)
    assert ("2026-01-01T00:00:00+00:00", "c1", 1) in out[2] and ("2026-01-01T00:10:00+00:00", "c1", 1) in out[2]


@pytest.mark.faults
def test_far_past_event_times_are_dropped_as_late_and_counted(tmp_path):
    inp, chk, out = str(tmp_path / "in"), str(tmp_path / "chk"), {}
    os.makedirs(inp)
    _write(f"{inp}/a.json", [_ev("c1", "2026-01-01T00:31:00Z")])
    _write(f"{inp}/b.json", [_ev("c1", "1970-01-02T00:00:00Z"), _ev("c1", "1900-01-01T00:00:00Z")])
    _write(f"{inp}/c.json", [_ev("c1", "1970-01-02T00:00:00Z"), _ev("c1", "1900-01-01T00:00:00Z")])
    q = _start(inp, chk, out)
    q.await_termination()
    by = {p["batch_id"]: p["state_operators"][0]["num_rows_dropped_by_watermark"] for p in q.recent_progress}
    # batch 1 judges lateness by W_0 = the epoch: only the 1900 row is late; batch 2 by 00:26: both
    assert by[1] == 1 and by[2] == 2
    # as in Spark, the 1970 row of batch 1 was not late yet: it forms its own window, emitted at once
    assert ("1970-01-02T00:00:00+00:00", "c1", 1) in out[1]


@pytest.mark.faults
def test_huge_row_and_empty_file_go_through(tmp_path):
    inp, chk, out = str(tmp_path / "in"), str(tmp_path / "chk"), {}
    os.makedirs(inp)
    huge = "x" * (8 << 20)  # one 8 MiB campaign id
    _write(f"{inp}/a.json", [_ev(huge, "2026-01-01T00:01:00Z"), _ev("c1", "2026-01-01T00:02:00Z")])
    _write(f"{inp}/b.json", [])
    _write(f"{inp}/c.json", [_ev("c1", "2026-01-01T00:40:00Z")])
    q = _start(inp, chk, out)
    q.await_termination()
    assert [p["num_input_rows"] for p in q.recent_progress][:3] == [2, 0, 1]
    emitted = sorted(row for b in out for row in out[b])
    assert emitted == sorted([("2026-01-01T00:00:00+00:00", huge, 1), ("2026-01-01T00:00:00+00:00", "c1", 1)])


@pytest.mark.faults
@pytest.mark.kafka
def test_huge_kafka_message_is_read_and_parsed(tmp_path, kafka_broker):
    from broker import create_topic, produce
    topic = create_topic(kafka_broker, partitions=1)
    big = json.dumps({"campaign_id": "c" * 900_000, "event_time": "2026-01-01T00:01:00Z"})
    produce(kafka_broker, topic, [big, json.dumps({"campaign_id": "c1", "event_time": "2026-01-01T00:02:00Z"})])
    got = {}
    q = (inc.read_stream.kafka(kafka_broker, topic=topic).parse_json(SCHEMA)
         .write_stream.foreach_batch(lambda t, b: got.setdefault(b, t)).checkpoint_location(str(tmp_path / "chk"))
         .trigger(available_now=True).start())
    q.await_termination()
    t = got[0]
    assert t.num_rows == 2 and len(t.column("campaign_id")[0].as_py()) == 900_000

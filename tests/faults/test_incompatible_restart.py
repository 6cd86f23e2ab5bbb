"""A restart with a changed query against an existing checkpoint is refused before any batch runs,
naming what changed and pointing at a new checkpoint + backfill."""
from __future__ import annotations

import pytest

import increments as inc
from increments import functions as F

from fault_testutil import write_clicks


def _query(inp, chk, build, **opts):
    s = inc.read_stream.files(inp, "json", "campaign_id STRING, event_time TIMESTAMP", max_files_per_trigger=1)
    w = (build(s.with_watermark("event_time", "5 minutes")).write_stream.output_mode("update")
         .foreach_batch(lambda t, b: calls.append(b)).checkpoint_location(chk).trigger(available_now=True))
    for k, v in opts.items():
        w = w.option(k, v)
    return w


calls: list[int] = []
ORIGINAL = lambda s: s.group_by(F.window("event_time", "10 minutes"), "campaign_id").count()  # noqa: E731


@pytest.mark.faults
@pytest.mark.parametrize("changed,opts,match", [
    (lambda s: s.group_by(F.window("event_time", "10 minutes")).count(), {}, r"state_schema\[0:"),
    (lambda s: s.group_by(F.window("event_time", "10 minutes"), "campaign_id").agg(F.count(), F.max("event_time")),
     {}, r"state_schema\[0:"),
    (lambda s: s.group_by(F.window("event_time", "20 minutes"), "campaign_id").count(), {}, r"state_schema\[0:"),
    (ORIGINAL, {"state_partitions": 3}, "state_partitions: checkpoint has 2, this start asks for 3"),
    (ORIGINAL, {"state_store": "memory"}, "state_store: checkpoint has 'rocksdb', this start asks for 'memory'"),
])
def test_changed_query_is_refused_before_any_batch(tmp_path, changed, opts, match):
    inp, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    write_clicks(inp, files=2)
    _query(inp, chk, ORIGINAL, state_partitions=2).start().await_termination()
    write_clicks(inp, files=3)  # new data waiting: nothing of it may be processed by the refused start
    calls.clear()
    merged = {"state_partitions": 2, **opts}
    with pytest.raises(inc.IncompatibleCheckpointError, match=match) as ei:
        _query(inp, chk, changed, **merged).start()
    assert "new checkpoint location and backfill" in str(ei.value)
    assert calls == []
    # the original query still runs on its checkpoint
    _query(inp, chk, ORIGINAL, state_partitions=2).start().await_termination()
    assert calls, "the unchanged query resumes"

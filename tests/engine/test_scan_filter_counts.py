"""num_input_rows and the event-time stats around filters, as Spark 4.3 reports them (SEMANTICS.md
rule 3; each case below was run on real Spark with the same file): a simple predicate on a
non-event column is pushed below the watermark and into the JSON scan (excluded from both); a
function of a column is pushed below the watermark only (excluded from the max, counted as input);
a filter on the event-time column stays above the watermark (counted, feeds the max)."""
from __future__ import annotations

import json

import pytest

import increments as inc


@pytest.mark.parametrize("build,rows,mx,mn", [
    (lambda s: s.with_watermark("event_time", "5 minutes").filter("campaign_id != 'c0'"), 6, "00:08", "00:01"),
    (lambda s: s.with_watermark("event_time", "5 minutes").filter("upper(campaign_id) != 'C0'"), 10, "00:08", "00:01"),
    (lambda s: s.with_watermark("event_time", "5 minutes").filter("event_time < TIMESTAMPTZ '2026-01-01 00:05:00+00'"),
     10, "00:09", "00:00"),
    (lambda s: s.filter("n % 2 = 0").with_watermark("event_time", "5 minutes"), 10, "00:08", "00:00"),
])
def test_input_rows_and_event_time_stats_around_filters(tmp_path, build, rows, mx, mn):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text("".join(json.dumps({"campaign_id": f"c{i % 3}", "n": i,
                                                  "event_time": f"2026-01-01T00:{i:02d}:00Z"}) + "\n" for i in range(10)))
    s = inc.read_stream.files(str(d), "json", "campaign_id STRING, n BIGINT, event_time TIMESTAMP", max_files_per_trigger=1)
    q = (build(s).write_stream.foreach_batch(lambda t, b: None).checkpoint_location(str(tmp_path / "chk"))
         .trigger(available_now=True).start())
    q.await_termination()
    p = q.recent_progress[0]
    assert p["num_input_rows"] == rows and p["sources"][0]["num_input_rows"] == rows
    assert p["event_time"]["max"] == f"2026-01-01T{mx}:00.000Z" and p["event_time"]["min"] == f"2026-01-01T{mn}:00.000Z"

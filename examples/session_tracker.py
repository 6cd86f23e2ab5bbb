"""Session tracker: transform_with_state with an event-time timer.

Each user's clicks extend their session; when the watermark passes `last click + gap` (the user
went idle), the event-time timer fires and the session is emitted once, then its state cleared.
One JSON file per micro-batch (max_files_per_trigger=1), append mode, parquet sink. Checked against
Spark 4.3 (same processor with PySpark's transformWithState): same sessions in the same batches.

    python examples/session_tracker.py [workdir]
"""
from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tempfile

import increments as inc

GAP_MS = 30_000


class SessionTracker(inc.StatefulProcessor):
    """State per user: the open session (start, last click, clicks) and the pages seen in it."""

    def init(self, handle):
        self.handle = handle
        self.session = handle.get_value_state("session", "start_ms BIGINT, last_ms BIGINT, clicks BIGINT")
        self.pages = handle.get_list_state("pages", "page STRING")

    def handle_input_rows(self, key, rows, timer_values):
        s = self.session.get()
        start, last, clicks = (s.start_ms, s.last_ms, s.clicks) if s else (None, None, 0)
        for r in rows:
            t = int(r["event_time"].timestamp() * 1000)
            start = t if start is None else min(start, t)
            last = t if last is None else max(last, t)
            clicks += 1
            self.pages.append_value((r["page"],))
        for old in self.handle.list_timers():
            self.handle.delete_timer(old)
        self.handle.register_timer(last + GAP_MS)        # fires when the watermark passes it
        self.session.update((start, last, clicks))
        return []

    def handle_expired_timer(self, key, timer_values, expired_timer_info):
        s = self.session.get()
        pages = [p.page for p in self.pages.get()]
        self.session.clear()
        self.pages.clear()
        utc = dt.timezone.utc
        yield {"user_id": key[0], "start": dt.datetime.fromtimestamp(s.start_ms / 1000, utc),
               "end": dt.datetime.fromtimestamp((s.last_ms + GAP_MS) / 1000, utc),
               "clicks": s.clicks, "pages": ",".join(pages)}


OUTPUT = "user_id STRING, start TIMESTAMP, end TIMESTAMP, clicks BIGINT, pages STRING"


def write_inputs(src: str) -> None:
    """Three files = three micro-batches of clicks (times in seconds past 12:00 UTC)."""
    batches = [
        [("alice", 0, "home"), ("alice", 10, "search"), ("bob", 5, "home")],
        [("alice", 25, "item"), ("bob", 70, "cart")],   # W -> 12:01:00, past alice's idle time (12:00:55)
        [("carol", 200, "home")],                        # batch 2 emits alice; W -> 12:03:10: the trailing
    ]                                                    # no-data batch 3 emits bob (idle 12:01:40); carol stays open
    os.makedirs(src, exist_ok=True)
    for i, rows in enumerate(batches):
        with open(os.path.join(src, f"clicks-{i:03d}.json"), "w") as f:
            for user, sec, page in rows:
                t = dt.datetime(2024, 1, 1, 12, 0, sec % 60, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=sec // 60)
                f.write(json.dumps({"user_id": user, "event_time": t.isoformat(), "page": page}) + "\n")


def build(src: str, out: str, checkpoint: str, state_store: str = "rocksdb"):
    clicks = inc.read_stream.files(src, "json", "user_id STRING, event_time TIMESTAMP, page STRING",
                                   max_files_per_trigger=1)
    sessions = (clicks.with_watermark("event_time", "10 seconds")
                .group_by("user_id")
                .transform_with_state(SessionTracker(), OUTPUT, time_mode="event_time"))
    return (sessions.write_stream.format("parquet").output_mode("append").checkpoint_location(checkpoint)
            .option("state_store", state_store).query_name("session_tracker").trigger(available_now=True))


def main(workdir: str) -> None:
    src, out, chk = (os.path.join(workdir, d) for d in ("clicks", "sessions", "chk"))
    if not os.path.isdir(src):
        write_inputs(src)
    q = build(src, out, chk).start(out)
    q.await_termination()
    for p in q.recent_progress:
        print(f"batch {p['batch_id']}: {p['num_input_rows']} rows in, {p['sink']['num_output_rows']} sessions out, "
              f"watermark {p['event_time'].get('watermark')}")
    for row in inc.read.parquet_sink(out).to_pylist():
        print(row)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="session-tracker-"))

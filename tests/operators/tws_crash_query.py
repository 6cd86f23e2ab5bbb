"""A transform_with_state query (event-time timers, value/list/map state) over a file source into
a parquet sink, drained with AvailableNow, run as a subprocess by test_transform_with_state.

usage: python tws_crash_query.py SRC OUT CHECKPOINT STATE_STORE
env CRASH_AT="<batch id>:<step>" SIGKILLs this process right after that protocol step
(plan, read, process, write, commit) of that batch (crashkit).
"""
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402

GAP_MS = 20_000


class Sessions(inc.StatefulProcessor):
    def init(self, handle):
        self.h = handle
        self.session = handle.get_value_state("session", "start_ms BIGINT, last_ms BIGINT")
        self.pages = handle.get_list_state("pages", "page STRING")
        self.per_page = handle.get_map_state("per_page", "page STRING", "n BIGINT")

    def handle_input_rows(self, key, rows, timer_values):
        s = self.session.get()
        start, last = (s.start_ms, s.last_ms) if s else (None, None)
        for r in rows:
            t = int(r["event_time"].timestamp() * 1000)
            start, last = (t if start is None else min(start, t)), (t if last is None else max(last, t))
            self.pages.append_value((r["page"],))
            prev = self.per_page.get_value((r["page"],))
            self.per_page.update_value((r["page"],), ((prev.n if prev else 0) + 1,))
        for old in self.h.list_timers():
            self.h.delete_timer(old)
        self.h.register_timer(last + GAP_MS)
        self.session.update((start, last))
        yield {"user_id": key[0], "kind": "open", "start_ms": start, "end_ms": last, "clicks": None, "detail": None}

    def handle_expired_timer(self, key, timer_values, info):
        s = self.session.get()
        pages = [p.page for p in self.pages.get()]
        counts = sorted(f"{k.page}={v.n}" for k, v in self.per_page.iterator())
        self.session.clear()
        self.pages.clear()
        self.per_page.clear()
        yield {"user_id": key[0], "kind": "closed", "start_ms": s.start_ms, "end_ms": info.get_expiry_time_in_ms(),
               "clicks": len(pages), "detail": ";".join(counts)}


OUTPUT = "user_id STRING, kind STRING, start_ms BIGINT, end_ms BIGINT, clicks BIGINT, detail STRING"


def main(src, out, chk, store):
    crashkit.crash_after_env("CRASH_AT")
    clicks = inc.read_stream.files(src, "json", "user_id STRING, event_time TIMESTAMP, page STRING",
                                   max_files_per_trigger=1)
    q = (clicks.with_watermark("event_time", "5 seconds").group_by("user_id")
         .transform_with_state(Sessions(), OUTPUT, time_mode="event_time")
         .write_stream.format("parquet").output_mode("append").checkpoint_location(chk)
         .option("state_store", store).option("state_partitions", 2).query_name("tws_crash")
         .trigger(available_now=True).start(out))
    q.await_termination()


if __name__ == "__main__":
    main(*sys.argv[1:5])

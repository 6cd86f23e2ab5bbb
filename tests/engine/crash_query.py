"""A user's stateless file query run as a subprocess by the crash tests.

Usage: python crash_query.py <input_dir> <checkpoint> <sink_kind> <sink_path> <log_url> [crash_batch crash_step]

When crash_batch/crash_step are given, the process is SIGKILLed right after that protocol step of
that batch completed (crashkit: a real crash, no cleanup, no flush). sink_kind "parquet" writes
the parquet sink at sink_path; any other kind, the idempotent foreach_batch writer (one JSON-lines
file per batch id under sink_path).
"""
from __future__ import annotations

import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402


def main() -> None:
    input_dir, checkpoint, sink_kind, sink_path, log_url = sys.argv[1:6]
    crashkit.crash_after(sys.argv[6:8])
    frame = (inc.read_stream.files(input_dir, "json", "id BIGINT, name STRING, amount DOUBLE",
                                   max_files_per_trigger=1)
             .filter("amount >= 0")
             .with_column("amount_cents", "CAST(round(amount * 100) AS BIGINT)")
             .select("id", "name", "amount_cents"))
    w = (frame.write_stream.checkpoint_location(checkpoint).query_name("crashy").option("log_url", log_url)
         .trigger(available_now=True))
    if sink_kind == "parquet":
        q = w.format("parquet").start(sink_path)
    else:
        q = w.foreach_batch(crashkit.jsonl_writer(sink_path)).start()
    q.await_termination()


if __name__ == "__main__":
    main()

"""A user's stateless file query run as a subprocess by the crash tests.

Usage: python crash_query.py <input_dir> <checkpoint> <sink_kind> <sink_path> <log_url> [crash_batch crash_step]

When crash_batch/crash_step are given, a listener SIGKILLs this process right after that
protocol step of that batch completed (a real crash: no cleanup, no flush).
"""
from __future__ import annotations

import json
import os
import sys

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_TESTS)]
sys.path.append(_TESTS)

import increments as inc  # noqa: E402
from crashpoints import CrashAt  # noqa: E402


def foreach_writer(out_dir: str):
    """The documented idempotent foreach_batch pattern: one file per batch id, replaced atomically."""
    os.makedirs(out_dir, exist_ok=True)

    def write(table, batch_id):
        tmp = os.path.join(out_dir, f".{batch_id}.tmp")
        with open(tmp, "w") as f:
            for row in table.to_pylist():
                f.write(json.dumps(row, default=str) + "\n")
        os.replace(tmp, os.path.join(out_dir, f"{batch_id}.jsonl"))
    return write


def main() -> None:
    input_dir, checkpoint, sink_kind, sink_path, log_url = sys.argv[1:6]
    if len(sys.argv) > 6:
        inc.streams.add_listener(CrashAt(int(sys.argv[6]), sys.argv[7]))
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
        q = w.foreach_batch(foreach_writer(sink_path)).start()
    q.await_termination()


if __name__ == "__main__":
    main()

"""A file query with max_files_per_trigger="auto", run as a subprocess by test_adaptive_batches.

Usage: python adaptive_query.py <input_dir> <checkpoint> <out_dir> <target> [crash_batch crash_step]
Each batch's rows go to <out_dir>/<batch id>.jsonl (crashkit's idempotent writer); with
crash_batch/crash_step, the process is SIGKILLed right after that step of that batch.
"""
from __future__ import annotations

import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402


def main() -> None:
    src, checkpoint, out_dir, target = sys.argv[1:5]
    crashkit.crash_after(sys.argv[5:7])
    q = (inc.read_stream.files(src, "json", "id BIGINT, f BIGINT", max_files_per_trigger="auto")
         .write_stream.foreach_batch(crashkit.jsonl_writer(out_dir)).checkpoint_location(checkpoint)
         .query_name("adaptive").option("target_batch_duration", target).trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

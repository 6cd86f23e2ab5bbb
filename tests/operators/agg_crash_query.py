"""The windowed aggregation of test_window_aggregate run as a subprocess by the crash test.

Usage: python agg_crash_query.py <src_dir> <checkpoint> <out_dir> <state_store> [crash_batch crash_step]
With crash_batch/crash_step, the process is SIGKILLed right after that step of that batch (crashkit).
"""
from __future__ import annotations

import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402


def _row(r):
    w = r["window"]
    return [w["start"].isoformat(), w["end"].isoformat(), r["id"], r["count"], r["sum(v)"]]


def main() -> None:
    src, checkpoint, out_dir, store = sys.argv[1:5]
    crashkit.crash_after(sys.argv[5:7])
    df = inc.read_stream.files(src, "json", "id STRING, ts TIMESTAMP, v BIGINT", max_files_per_trigger=1)
    q = (df.with_watermark("ts", "10 minutes").group_by(F.window("ts", "5 minutes"), "id").agg(F.count(), F.sum("v"))
         .write_stream.foreach_batch(crashkit.jsonl_writer(out_dir, _row)).output_mode("append")
         .checkpoint_location(checkpoint).query_name("agg_crash").option("state_store", store)
         .trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

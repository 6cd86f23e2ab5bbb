"""A dedup query with late rows sent to a Delta table, run as a subprocess by test_late_rows.

Usage: python late_rows_crash_query.py <src_dir> <checkpoint> <late_table> <out_dir> [crash_batch crash_step]
With crash_batch/crash_step, the process is SIGKILLed right after that step of that batch (crashkit).
"""
from __future__ import annotations

import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402


def main() -> None:
    src, checkpoint, late, out_dir = sys.argv[1:5]
    crashkit.crash_after(sys.argv[5:7])
    df = inc.read_stream.files(src, "json", "id STRING, ts TIMESTAMP, v BIGINT", max_files_per_trigger=1)
    q = (df.with_watermark("ts", "10 minutes", late_rows=inc.dead_letter.delta(late)).drop_duplicates(["id", "ts"])
         .write_stream.foreach_batch(crashkit.jsonl_writer(out_dir, lambda r: [r["id"], r["ts"].isoformat()]))
         .checkpoint_location(checkpoint).query_name("late_crash").option("state_store", "rocksdb")
         .trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

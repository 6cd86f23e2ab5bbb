"""A dedup query with late rows sent to a Delta table, run as a subprocess by test_late_rows.

Usage: python late_rows_crash_job.py <src_dir> <checkpoint> <late_table> <out_dir> [crash_batch crash_step]
With crash_batch/crash_step, a listener SIGKILLs the process right after that step of that batch.
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


def main() -> None:
    src, checkpoint, late, out_dir = sys.argv[1:5]
    if len(sys.argv) > 5:
        inc.streams.add_listener(CrashAt(int(sys.argv[5]), sys.argv[6]))
    os.makedirs(out_dir, exist_ok=True)

    def write(table, batch_id):  # idempotent per batch id: one file, replaced atomically
        tmp = os.path.join(out_dir, f".{batch_id}.tmp")
        with open(tmp, "w") as f:
            for r in table.to_pylist():
                f.write(json.dumps([r["id"], r["ts"].isoformat()]) + "\n")
        os.replace(tmp, os.path.join(out_dir, f"{batch_id}.jsonl"))

    df = inc.read_stream.files(src, "json", "id STRING, ts TIMESTAMP, v BIGINT", max_files_per_trigger=1)
    q = (df.with_watermark("ts", "10 minutes", late_rows=inc.dead_letter.delta(late)).drop_duplicates(["id", "ts"])
         .write_stream.foreach_batch(write).checkpoint_location(checkpoint).query_name("late_crash")
         .option("state_store", "rocksdb").trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

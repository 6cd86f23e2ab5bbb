"""The windowed aggregation of test_window_aggregate run as a subprocess by the crash test.

Usage: python agg_crash_job.py <src_dir> <checkpoint> <out_dir> <state_store> [crash_batch crash_step]
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
from increments import functions as F  # noqa: E402


def main() -> None:
    src, checkpoint, out_dir, store = sys.argv[1:5]
    if len(sys.argv) > 5:
        inc.streams.add_listener(CrashAt(int(sys.argv[5]), sys.argv[6]))
    os.makedirs(out_dir, exist_ok=True)

    def write(table, batch_id):  # idempotent per batch id: one file, replaced atomically
        tmp = os.path.join(out_dir, f".{batch_id}.tmp")
        with open(tmp, "w") as f:
            for r in table.to_pylist():
                w = r["window"]
                f.write(json.dumps([w["start"].isoformat(), w["end"].isoformat(), r["id"], r["count"], r["sum(v)"]]) + "\n")
        os.replace(tmp, os.path.join(out_dir, f"{batch_id}.jsonl"))

    df = inc.read_stream.files(src, "json", "id STRING, ts TIMESTAMP, v BIGINT", max_files_per_trigger=1)
    q = (df.with_watermark("ts", "10 minutes").group_by(F.window("ts", "5 minutes"), "id").agg(F.count(), F.sum("v"))
         .write_stream.foreach_batch(write).output_mode("append").checkpoint_location(checkpoint)
         .query_name("agg_crash").option("state_store", store).trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

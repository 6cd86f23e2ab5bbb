"""The left outer join scenario (join_testutil) run as a subprocess by the crash test.

Usage: python join_crash_job.py <imps_dir> <clicks_dir> <checkpoint> <out_dir> <state_store> [crash_batch crash_step]
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

COND = "c.ad_id = i.ad_id AND c.click_time BETWEEN i.imp_time AND i.imp_time + INTERVAL 1 HOUR"


def main() -> None:
    imps_dir, clicks_dir, checkpoint, out_dir, store = sys.argv[1:6]
    if len(sys.argv) > 6:
        inc.streams.add_listener(CrashAt(int(sys.argv[6]), sys.argv[7]))
    imps = (inc.read_stream.files(imps_dir, "json", "imp_id STRING, ad_id BIGINT, imp_time TIMESTAMP",
                                  max_files_per_trigger=1).with_watermark("imp_time", "10 minutes").alias("i"))
    clicks = (inc.read_stream.files(clicks_dir, "json", "click_id STRING, ad_id BIGINT, click_time TIMESTAMP",
                                    max_files_per_trigger=1).with_watermark("click_time", "10 minutes").alias("c"))
    os.makedirs(out_dir, exist_ok=True)

    def write(table, batch_id):  # idempotent per batch id: one file, replaced atomically
        tmp = os.path.join(out_dir, f".{batch_id}.tmp")
        with open(tmp, "w") as f:
            for row in table.to_pylist():
                f.write(json.dumps(row) + "\n")
        os.replace(tmp, os.path.join(out_dir, f"{batch_id}.jsonl"))
    q = (imps.join(clicks, COND, "left_outer").select("i.imp_id", "c.click_id").write_stream
         .foreach_batch(write).checkpoint_location(checkpoint).query_name("join_crash")
         .option("state_store", store).trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

"""The left outer join scenario (join_testutil) run as a subprocess by the crash test.

Usage: python join_crash_query.py <imps_dir> <clicks_dir> <checkpoint> <out_dir> <state_store> [crash_batch crash_step]
With crash_batch/crash_step, the process is SIGKILLed right after that step of that batch (crashkit).
"""
from __future__ import annotations

import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402

COND = "c.ad_id = i.ad_id AND c.click_time BETWEEN i.imp_time AND i.imp_time + INTERVAL 1 HOUR"


def main() -> None:
    imps_dir, clicks_dir, checkpoint, out_dir, store = sys.argv[1:6]
    crashkit.crash_after(sys.argv[6:8])
    imps = (inc.read_stream.files(imps_dir, "json", "imp_id STRING, ad_id BIGINT, imp_time TIMESTAMP",
                                  max_files_per_trigger=1).with_watermark("imp_time", "10 minutes").alias("i"))
    clicks = (inc.read_stream.files(clicks_dir, "json", "click_id STRING, ad_id BIGINT, click_time TIMESTAMP",
                                    max_files_per_trigger=1).with_watermark("click_time", "10 minutes").alias("c"))
    q = (imps.join(clicks, COND, "left_outer").select("i.imp_id", "c.click_id").write_stream
         .foreach_batch(crashkit.jsonl_writer(out_dir)).checkpoint_location(checkpoint).query_name("join_crash")
         .option("state_store", store).trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

"""A files query with a dropping expectation and a quarantine table, run as a subprocess by
test_expectations (SIGKILL after a protocol step, then a clean restart).

Usage: python expect_crash_query.py <src_dir> <checkpoint> <quarantine> <out_dir> [crash_batch crash_step]
"""
from __future__ import annotations

import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402


def main() -> None:
    src, checkpoint, quarantine, out_dir = sys.argv[1:5]
    crashkit.crash_after(sys.argv[5:7])
    df = inc.read_stream.files(src, "json", "id BIGINT, amount DOUBLE", max_files_per_trigger=1)
    q = (df.expect("positive_amount", "amount > 0", "drop", quarantine=inc.dead_letter.delta(quarantine))
         .write_stream.foreach_batch(crashkit.jsonl_writer(out_dir, lambda r: [r["id"], r["amount"]]))
         .checkpoint_location(checkpoint).query_name("expect_crash").trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

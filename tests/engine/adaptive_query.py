"""A file query with max_files_per_trigger="auto", run as a subprocess by test_adaptive_batches.

Usage: python adaptive_query.py <input_dir> <checkpoint> <out_dir> <target> [crash_batch crash_step]
Each batch's rows go to <out_dir>/<batch id>.jsonl (replaced atomically: idempotent per batch id).
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
    src, checkpoint, out_dir, target = sys.argv[1:5]
    if len(sys.argv) > 5:
        inc.streams.add_listener(CrashAt(int(sys.argv[5]), sys.argv[6]))
    os.makedirs(out_dir, exist_ok=True)

    def write(table, batch_id):
        tmp = os.path.join(out_dir, f".{batch_id}.tmp")
        with open(tmp, "w") as f:
            for r in table.to_pylist():
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, os.path.join(out_dir, f"{batch_id}.jsonl"))

    q = (inc.read_stream.files(src, "json", "id BIGINT, f BIGINT", max_files_per_trigger="auto")
         .write_stream.foreach_batch(write).checkpoint_location(checkpoint).query_name("adaptive")
         .option("target_batch_duration", target).trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

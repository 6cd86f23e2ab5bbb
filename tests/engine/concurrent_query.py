"""A stateless file query whose sink is slow, run twice at once by test_concurrent_runners.

Usage: python concurrent_query.py <input_dir> <checkpoint> <out_dir> <log_url>
The sink writes one file per batch id (idempotent) and appends a line per call to calls.log.
"""
from __future__ import annotations

import json
import os
import sys
import time

import increments as inc


def main() -> None:
    input_dir, checkpoint, out_dir, log_url = sys.argv[1:5]
    os.makedirs(out_dir, exist_ok=True)

    def sink(table, batch_id):
        time.sleep(0.4)
        with open(os.path.join(out_dir, "calls.log"), "a") as f:
            f.write(f"{os.getpid()} {batch_id}\n")
        tmp = os.path.join(out_dir, f".{batch_id}.{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(table.column("id").to_pylist(), f)
        os.replace(tmp, os.path.join(out_dir, f"{batch_id}.json"))

    q = (inc.read_stream.files(input_dir, "json", "id BIGINT", max_files_per_trigger=1).select("id")
         .write_stream.foreach_batch(sink).checkpoint_location(checkpoint).query_name("twins")
         .option("log_url", log_url).trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

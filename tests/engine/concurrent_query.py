"""A stateless file query whose sink is slow, run twice at once by test_concurrent_runners.

Usage: python concurrent_query.py <input_dir> <checkpoint> <out_dir> <log_url> [stateful]
The sink writes one file per batch id (crashkit's idempotent writer) and appends a line per call
to calls.log.
With "stateful", the query is a running count per id % 3 (complete mode, RocksDB state, cache
directory under the process's own TMPDIR) and each batch file holds the counts.
Once imported, the script writes <out_dir>/ready.<pid> and waits for <out_dir>/go, so that both
runners start the query together however long their imports took on a loaded machine.
"""
from __future__ import annotations

import json
import os
import sys
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402


def main() -> None:
    input_dir, checkpoint, out_dir, log_url = sys.argv[1:5]
    stateful = sys.argv[5:6] == ["stateful"]
    os.makedirs(out_dir, exist_ok=True)
    open(os.path.join(out_dir, f"ready.{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(out_dir, "go")):
        if time.monotonic() > deadline:
            sys.exit("concurrent_query.py: no go signal within 120 s")
        time.sleep(0.01)

    write = crashkit.batch_file_writer(
        out_dir, lambda t: json.dumps(t.to_pylist() if stateful else t.column("id").to_pylist()), ".json")

    def sink(table, batch_id):
        time.sleep(0.4)
        with open(os.path.join(out_dir, "calls.log"), "a") as f:
            f.write(f"{os.getpid()} {batch_id}\n")
        write(table, batch_id)

    frame = inc.read_stream.files(input_dir, "json", "id BIGINT", max_files_per_trigger=1).select("id")
    w = frame.write_stream
    if stateful:
        w = (frame.with_column("g", "id % 3").group_by("g").count().write_stream.output_mode("complete")
             .option("state_store", "rocksdb").option("state_partitions", 2))
    q = (w.foreach_batch(sink).checkpoint_location(checkpoint).query_name("twins")
         .option("log_url", log_url).trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

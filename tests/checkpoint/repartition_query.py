"""A running count per key that keeps running (processing_time trigger), for test_repartition_fence.

Usage: python repartition_query.py <input_dir> <checkpoint> <out_dir> <partitions> [stop_after_plan]
Complete mode, RocksDB state with <partitions> partitions; each batch's counts go to
<out_dir>/<batch>.json (crashkit's idempotent writer). The query runs until <out_dir>/stop exists
(exit 0) or it fails (exit 1, its error on stderr). With stop_after_plan = K, the process stops
itself (SIGSTOP) right after the plan step of batch K: a runner frozen between its write-ahead
offsets[K] and the rest of the batch, until the test sends SIGCONT.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402


class StopAfterPlan:
    def __init__(self, batch: int):
        self.batch = batch

    def on_batch_step(self, query_name: str, batch_id: int, step: str) -> None:
        if batch_id == self.batch and step == "plan":
            os.kill(os.getpid(), signal.SIGSTOP)


def main() -> None:
    input_dir, checkpoint, out_dir, partitions = sys.argv[1:5]
    os.makedirs(out_dir, exist_ok=True)
    if len(sys.argv) > 5:
        inc.streams.add_listener(StopAfterPlan(int(sys.argv[5])))
    write = crashkit.batch_file_writer(out_dir, lambda t: json.dumps(sorted(t.to_pylist(), key=str)), ".json")
    q = (inc.read_stream.files(input_dir, "json", "id BIGINT", max_files_per_trigger=1)
         .with_column("g", "id % 5").group_by("g").count()
         .write_stream.foreach_batch(write).output_mode("complete").option("state_partitions", int(partitions))
         .checkpoint_location(checkpoint).query_name("counts").trigger(processing_time="200 milliseconds").start())
    while q.is_active and not os.path.exists(os.path.join(out_dir, "stop")):
        time.sleep(0.05)
    q.stop()
    if q.exception() is not None:
        print(str(q.exception()), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

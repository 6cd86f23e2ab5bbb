"""The fault suite's query, run as a subprocess: files -> watermark -> 10-minute windowed count
(append) -> one of the sinks, optionally killed (SIGKILL) right after a protocol step.

Usage: python fault_query.py <json config>
config: input, checkpoint, sink (delta|postgres|parquet|foreach_batch), target (path or table),
        pg_url, state_store, crash_batch, crash_step, log_url
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


def foreach_files(out_dir: str):
    """The documented foreach_batch pattern: one file per batch id, replaced atomically."""
    os.makedirs(out_dir, exist_ok=True)

    def write(table, batch_id):
        rows = [{"start": r["window"]["start"].isoformat(), "campaign_id": r["campaign_id"], "count": r["count"]}
                for r in table.to_pylist()]
        tmp = os.path.join(out_dir, f".{batch_id}.tmp")
        with open(tmp, "w") as f:
            json.dump(rows, f)
        os.replace(tmp, os.path.join(out_dir, f"{batch_id}.json"))
    return write


def main() -> None:
    c = json.loads(sys.argv[1])
    if c.get("crash_step"):
        inc.streams.add_listener(CrashAt(int(c["crash_batch"]), c["crash_step"]))
    counts = (inc.read_stream.files(c["input"], "json", "campaign_id STRING, event_time TIMESTAMP",
                                    max_files_per_trigger=1)
              .with_watermark("event_time", "5 minutes")
              .group_by(F.window("event_time", "10 minutes"), "campaign_id").count())
    w = (counts.write_stream.output_mode("append").checkpoint_location(c["checkpoint"]).query_name("faulty")
         .option("state_store", c.get("state_store", "rocksdb")).option("state_partitions", 2)
         .trigger(available_now=True))
    if c.get("log_url"):
        w = w.option("log_url", c["log_url"])
    sink = c["sink"]
    if sink == "foreach_batch":
        q = w.foreach_batch(foreach_files(c["target"])).start()
    elif sink == "postgres":
        q = w.format("postgres").option("url", c["pg_url"]).option("table", c["target"]).start()
    else:
        q = w.format(sink).start(c["target"])
    q.await_termination()


if __name__ == "__main__":
    main()

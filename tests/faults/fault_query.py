"""The fault suite's query, run as a subprocess: files -> watermark -> 10-minute windowed count
(append) -> one of the sinks, optionally killed (SIGKILL) right after a protocol step.

Usage: python fault_query.py <json config>
config: input, checkpoint, sink (delta|postgres|parquet|iceberg|foreach_batch), target (path or table),
        pg_url, state_store, crash_batch, crash_step, log_url, catalog (iceberg: pyiceberg catalog properties)
"""
from __future__ import annotations

import json
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402


def _rows(table) -> str:
    return json.dumps([{"start": r["window"]["start"].isoformat(), "campaign_id": r["campaign_id"], "count": r["count"]}
                       for r in table.to_pylist()])


def main() -> None:
    c = json.loads(sys.argv[1])
    if c.get("crash_step"):
        crashkit.crash_after([c["crash_batch"], c["crash_step"]])
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
        q = w.foreach_batch(crashkit.batch_file_writer(c["target"], _rows, ".json")).start()
    elif sink == "postgres":
        q = w.format("postgres").option("url", c["pg_url"]).option("table", c["target"]).start()
    elif sink == "iceberg":
        q = w.format("iceberg").option("catalog", c["catalog"]).start(c["target"])
    else:
        q = w.format(sink).start(c["target"])
    q.await_termination()


if __name__ == "__main__":
    main()

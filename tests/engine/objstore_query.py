"""A windowed aggregation (files -> watermark -> 10-minute count, append -> Delta) run as a
subprocess by test_object_store.py; its input, checkpoint and sink may each be a local path or an
object-store URL.

Usage: python objstore_query.py <json config>
config: input, checkpoint, target, log_url (optional), storage_options (optional, the query's),
        state_store (default rocksdb), progress (optional path: the run's progress as JSON)
"""
from __future__ import annotations

import json
import sys

import increments as inc
from increments import functions as F


def main() -> None:
    c = json.loads(sys.argv[1])
    counts = (inc.read_stream.files(c["input"], "json", "campaign_id STRING, event_time TIMESTAMP",
                                    max_files_per_trigger=1)
              .with_watermark("event_time", "5 minutes")
              .group_by(F.window("event_time", "10 minutes"), "campaign_id").count())
    w = (counts.write_stream.format("delta").output_mode("append").checkpoint_location(c["checkpoint"])
         .query_name("clicks_by_window").option("state_store", c.get("state_store", "rocksdb"))
         .option("state_partitions", 2).trigger(available_now=True))
    if c.get("log_url"):
        w = w.option("log_url", c["log_url"])
    if c.get("storage_options"):
        w = w.option("storage_options", c["storage_options"])
    q = w.start(c["target"])
    q.await_termination()
    if c.get("progress"):
        with open(c["progress"], "w") as f:
            json.dump(q.recent_progress, f, default=str)


if __name__ == "__main__":
    main()

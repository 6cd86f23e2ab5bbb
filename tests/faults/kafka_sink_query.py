"""The Kafka sink's crash-matrix query, run as a subprocess: files -> watermark -> 10-minute
windowed count (append) -> format("kafka") (key = campaign, value = the window's JSON), exactly
once, optionally killed (SIGKILL) after a protocol step or inside the Kafka transaction
(crashkit.kafka_crash_at).

Usage: python kafka_sink_query.py <json config>
config: input, checkpoint, bootstrap, topic, state_store, crash_batch, crash_step | kafka_point
"""
from __future__ import annotations

import json
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402


def main() -> None:
    c = json.loads(sys.argv[1])
    if c.get("crash_step"):
        crashkit.crash_after([c["crash_batch"], c["crash_step"]])
    if c.get("kafka_point"):
        crashkit.kafka_crash_at(c["crash_batch"], c["kafka_point"])
    counts = (inc.read_stream.files(c["input"], "json", "campaign_id STRING, event_time TIMESTAMP",
                                    max_files_per_trigger=1)
              .with_watermark("event_time", "5 minutes")
              .group_by(F.window("event_time", "10 minutes"), "campaign_id").count())
    out = counts.select("campaign_id AS key",
                        'to_json(struct_pack(start := "window"."start", campaign_id := campaign_id, n := "count")) AS value')
    q = (out.write_stream.format("kafka").output_mode("append").checkpoint_location(c["checkpoint"])
         .query_name("kafka_faulty").option("kafka.bootstrap.servers", c["bootstrap"]).option("topic", c["topic"])
         .option("state_store", c.get("state_store", "rocksdb")).option("state_partitions", 2)
         .trigger(available_now=True).start())
    q.await_termination()


if __name__ == "__main__":
    main()

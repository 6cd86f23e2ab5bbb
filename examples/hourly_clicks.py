"""The worked example: hourly clicks per campaign, 15-minute watermark, append mode, into Delta.

    clicks (JSON files or Kafka) -> with_watermark(event_time, 15 minutes)
        -> group_by(window(event_time, 1 hour), campaign_id).count() -> Delta (append)

`hourly_clicks_query(...)` returns the configured writer (not started), so the same query serves
the local runner (examples/demo.py) and the Dagster definitions (examples/queries.py).
"""
from __future__ import annotations

import increments as inc
from increments import functions as F

CLICK_SCHEMA = "campaign_id STRING, user_id STRING, event_time TIMESTAMP"


def hourly_counts(clicks):
    return (clicks.with_watermark("event_time", "15 minutes")
            .group_by(F.window("event_time", "1 hour"), "campaign_id")
            .count())


def hourly_clicks_query(input_dir: str, checkpoint: str, *, kafka_bootstrap: str | None = None,
                        topic: str = "clicks", max_files_per_trigger: int = 1, **options):
    if kafka_bootstrap:
        clicks = (inc.read_stream.kafka(bootstrap_servers=kafka_bootstrap, topic=topic,
                                        starting_offsets="earliest", max_offsets_per_trigger=200_000)
                  .parse_json(CLICK_SCHEMA))
    else:
        clicks = inc.read_stream.files(input_dir, "json", CLICK_SCHEMA, max_files_per_trigger=max_files_per_trigger)
    w = (hourly_counts(clicks).write_stream
         .format("delta").output_mode("append")
         .checkpoint_location(checkpoint)
         .query_name("hourly_clicks")
         .trigger(available_now=True))
    for k, v in options.items():
        w = w.option(k, v)
    return w

"""The queries of tests/lifecycle/test_migrate_from_sink.py: a bronze (pass-through) query on files and
its changed version, plus old queries whose tables cannot stand in for the source. Input,
checkpoint and sink from the environment: FS_IN, FS_CHK, FS_OUT (FS_KAFKA, FS_TOPIC for Kafka; FS_LOG
the offsets/commits log URL, default the checkpoint's SQLite file)."""
from __future__ import annotations

import os

import increments as inc

SCHEMA = "campaign_id STRING, amount BIGINT, event_time TIMESTAMP"


def _files(schema: str = SCHEMA):
    return inc.read_stream.files(os.environ["FS_IN"], "json", schema, max_files_per_trigger=1)


def _write(frame, name: str = "bronze"):
    w = (frame.write_stream.format("delta").output_mode("append").query_name(name)
         .checkpoint_location(os.environ["FS_CHK"]).trigger(available_now=True).option("path", os.environ["FS_OUT"]))
    return w.option("log_url", os.environ["FS_LOG"]) if os.environ.get("FS_LOG") else w


def bronze():               # the old query: the source's rows as they are
    return _write(_files().select("campaign_id", "amount", "event_time"))


def changed():              # the new version: another filter, a derived column, one column less
    return _write(_files().filter("amount % 2 = 0").with_column("amount_x10", "amount * 10")
                  .select("campaign_id", "amount", "amount_x10"))


def filtered():             # an old query that dropped rows: its table lacks input the changed query keeps
    return _write(_files().filter("amount % 8 <> 3"))


def transformed():          # an old query that rewrote a column the changed query reads
    return _write(_files().select("upper(campaign_id) AS campaign_id", "amount", "event_time"))


def wider():                # the changed query reads a column the old table never had
    return _write(_files(SCHEMA + ", channel STRING").select("campaign_id", "amount", "channel"))


def _kafka():
    return inc.read_stream.kafka(os.environ["FS_KAFKA"], os.environ["FS_TOPIC"], starting_offsets="earliest",
                                 max_offsets_per_trigger=10)


def kafka_raw():            # a raw landing table of a topic: every Kafka column as read
    return _write(_kafka().select("key", "value", "topic", "partition", "offset", "timestamp"), "raw")


def kafka_parsed():         # the new version parses the values
    return _write(_kafka().parse_json("campaign_id STRING, amount BIGINT", keep=["partition", "offset"])
                  .filter("amount % 2 = 0"), "raw")


def windowed():             # a stateful new version over the bronze input: revenue per 10-minute window
    from increments import functions as F
    return _write(_files().with_watermark("event_time", "5 minutes")
                  .group_by(F.window("event_time", "10 minutes"), "campaign_id")
                  .agg(F.count(), F.sum("amount").alias("revenue")))


def crashing():             # `changed`, killed right after the sink write of backfill batch FS_CRASH_BATCH
    import sys
    sys.path.append(os.path.dirname(os.path.dirname(__file__)))
    from crashkit import CrashAt
    return changed().listener(CrashAt(int(os.environ["FS_CRASH_BATCH"]), "write"))

"""The query of tests/lifecycle/test_migrate.py before and after a changed aggregation. Input,
checkpoint and sink from the environment: MIG_IN, MIG_CHK, MIG_OUT."""
from __future__ import annotations

import os

import increments as inc
from increments import functions as F


def _grouped():
    s = inc.read_stream.files(os.environ["MIG_IN"], "json", "campaign_id STRING, amount BIGINT, event_time TIMESTAMP",
                              max_files_per_trigger=1)
    return s.with_watermark("event_time", "5 minutes").group_by(F.window("event_time", "10 minutes"), "campaign_id")


def _write(frame):
    return (frame.write_stream.format("delta").output_mode("append").query_name("revenue")
            .checkpoint_location(os.environ["MIG_CHK"]).option("state_partitions", 2)
            .trigger(available_now=True).option("path", os.environ["MIG_OUT"]))


def original():
    return _write(_grouped().count())


def changed():          # a changed aggregation: unsafe on the old checkpoint (increments check exits 1)
    return _write(_grouped().agg(F.count(), F.sum("amount").alias("revenue")))

"""Variants of one query for `increments check` (tests/lifecycle/test_check_cli.py). The input,
checkpoint and sink come from the environment: CHECK_IN, CHECK_IN2, CHECK_CHK, CHECK_OUT."""
from __future__ import annotations

import os

import increments as inc
from increments import functions as F

SCHEMA = "campaign_id STRING, user_id STRING, event_time TIMESTAMP, ts2 TIMESTAMP"


def _clicks(path_var: str = "CHECK_IN"):
    return inc.read_stream.files(os.environ[path_var], "json", SCHEMA)


def _write(frame, partitions: int = 2):
    return (frame.write_stream.format("delta").output_mode("append").query_name("checked")
            .checkpoint_location(os.environ["CHECK_CHK"]).option("state_partitions", partitions)
            .trigger(available_now=True).option("path", os.environ["CHECK_OUT"]))


def _agg(s, keys=("campaign_id",), aggs=None, col="event_time"):
    g = s.with_watermark(col, "5 minutes").group_by(F.window(col, "10 minutes"), *keys)
    return g.agg(*aggs) if aggs else g.count()


def original():
    return _write(_agg(_clicks()))


def filter_after():          # a filter and a projection after the last stateful operator: allowed
    return _write(_agg(_clicks()).filter("count > 0").select('"window"', "campaign_id", "count"))


def filter_before():         # a filter before the aggregation: allowed
    return _write(_agg(_clicks().filter("campaign_id <> 'zzz'")))


def changed_key():
    return _write(_agg(_clicks(), keys=("user_id",)))


def changed_aggregate():
    return _write(_agg(_clicks(), aggs=[F.count(), F.max("event_time").alias("last")]))


def changed_aggregate_same_schema():   # count(*) -> count(user_id) AS count: the state schema stays
    return _write(_agg(_clicks(), aggs=[F.count("user_id").alias("count")]))


def changed_watermark_column():
    return _write(_agg(_clicks(), col="ts2"))


def more_partitions():
    return _write(_agg(_clicks()), partitions=3)


def new_source():
    return _write(_agg(_clicks().union(_clicks("CHECK_IN2"))))


def not_a_writer():
    return _clicks()


def projection_drops_column():  # allowed by the state, but the Delta table keeps its schema
    return _write(_agg(_clicks()).select('"window"', "campaign_id"))

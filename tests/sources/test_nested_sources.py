"""Nested types (STRUCT, ARRAY, MAP) declared in Spark's DDL and read from JSON files, Parquet,
Delta, the memory source and parse_json (memory and Kafka values), converted as Spark 4.3's JSON
reader does (PERMISSIVE, partial results; rows recorded on Spark 4.3, file source and from_json)."""
from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

import increments as inc
from increments.types import parse_schema

SCHEMA = "id BIGINT, e STRUCT<user: STRUCT<id: STRING, c: STRING>, n: INT>, tags ARRAY<STRING>, m MAP<STRING, BIGINT>"
JSON_ROWS = [
    {"id": 1, "e": {"user": {"id": 5, "c": "fr"}, "n": 1}, "tags": ["a", "b"], "m": {"k": 1}},
    {"id": 2, "e": {}, "tags": [], "m": {}},
    {"id": 3, "e": None},
    {"id": 4, "e": {"user": {"id": "x"}, "n": "bad"}, "tags": ["z", 3], "m": {"k": "bad"}},
    {"id": 5, "e": 7, "tags": "notarr", "m": [1]},
    {"id": 6, "e": {"n": 2.5}, "tags": [{"a": 1}, None], "m": {"k": 2.5}},
    {"id": 7, "e": {"n": 3, "user": {"id": "q", "c": True}}, "tags": [1.5, True], "m": {"k": None}},
]
# Spark 4.3: spark.read.schema(SCHEMA).json(...) and from_json(value, SCHEMA) give these rows
# (a MAP with a value that does not convert is NULL as a whole; a JSON object in a STRING is its
# text: from_json's compact text, which increments gives for files too)
SPARK_ROWS = [
    {"id": 1, "e": {"user": {"id": "5", "c": "fr"}, "n": 1}, "tags": ["a", "b"], "m": [("k", 1)]},
    {"id": 2, "e": {"user": None, "n": None}, "tags": [], "m": []},
    {"id": 3, "e": None, "tags": None, "m": None},
    {"id": 4, "e": {"user": {"id": "x", "c": None}, "n": None}, "tags": ["z", "3"], "m": None},
    {"id": 5, "e": None, "tags": None, "m": None},
    {"id": 6, "e": {"user": None, "n": None}, "tags": ['{"a":1}', None], "m": None},
    {"id": 7, "e": {"user": {"id": "q", "c": "true"}, "n": 3}, "tags": ["1.5", "true"], "m": [("k", None)]},
]


def _rows(frame, tmp_path, **opts):
    name = "nested_" + uuid.uuid4().hex[:8]
    w = (frame.write_stream.format("memory").query_name(name).trigger(available_now=True)
         .checkpoint_location(str(tmp_path / ("chk_" + name))))
    for k, v in opts.items():
        w = w.option(k, v)
    w.start().await_termination()
    out = []
    for _, t in sorted(inc.memory_batches(name).items()):
        out.extend(t.to_pylist())
    return sorted(out, key=lambda r: r["id"] if r["id"] is not None else -1)


def test_json_files_convert_nested_values_as_spark(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text("\n".join(json.dumps(r) for r in JSON_ROWS) + "\n")
    frame = inc.read_stream.files(str(d), "json", SCHEMA)
    assert frame.schema == parse_schema(SCHEMA).to_arrow()
    assert _rows(frame, tmp_path) == SPARK_ROWS


def test_parse_json_converts_nested_values_as_spark_from_json(tmp_path):
    src = inc.read_stream.memory("value STRING")
    src.add_data([{"value": json.dumps(r)} for r in JSON_ROWS])
    assert _rows(src.parse_json(SCHEMA), tmp_path) == SPARK_ROWS


def test_duckdb_spelling_is_the_same_schema(tmp_path):
    duck = 'id BIGINT, e STRUCT("user" STRUCT(id VARCHAR, c VARCHAR), n INTEGER), tags VARCHAR[], m MAP(VARCHAR, BIGINT)'
    src = inc.read_stream.memory("value STRING")
    src.add_data([{"value": json.dumps(r)} for r in JSON_ROWS])
    assert _rows(src.parse_json(duck), tmp_path) == SPARK_ROWS


def _native_table():
    return pa.Table.from_pylist([r for r in SPARK_ROWS], schema=parse_schema(SCHEMA).to_arrow())


def test_parquet_delta_and_memory_sources_keep_nested_values(tmp_path):
    t = _native_table()
    (tmp_path / "pq").mkdir()
    pq.write_table(t, str(tmp_path / "pq" / "a.parquet"))
    write_deltalake(str(tmp_path / "delta"), t)
    mem = inc.read_stream.memory(SCHEMA)
    mem.add_data(t.to_pylist())
    for frame in (inc.read_stream.files(str(tmp_path / "pq"), "parquet", SCHEMA),
                  inc.read_stream.delta(str(tmp_path / "delta")), mem):
        assert _rows(frame, tmp_path) == SPARK_ROWS


@pytest.mark.kafka
def test_kafka_values_parse_into_nested_columns(kafka_broker, tmp_path):
    from broker import create_topic, produce
    topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, topic, [json.dumps(r) for r in JSON_ROWS])
    frame = inc.read_stream.kafka(bootstrap_servers=kafka_broker, topic=topic).parse_json(SCHEMA)
    assert _rows(frame, tmp_path) == SPARK_ROWS

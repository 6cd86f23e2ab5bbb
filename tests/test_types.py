"""increments/types.py, the one Arrow <-> DuckDB type mapping: schema strings, the names a state
schema records (they are compared by `increments check`, so they must not change) and read back."""
from __future__ import annotations

import pyarrow as pa
import pytest

from increments.types import arrow_to_duckdb, duckdb_to_arrow, parse_schema, state_type_name


def test_schema_strings_use_spark_names():
    s = parse_schema("id BIGINT, name STRING, at TIMESTAMP, local TIMESTAMP_NTZ, price DECIMAL(10, 2), ok BOOLEAN")
    assert str(s) == "id BIGINT, name VARCHAR, at TIMESTAMPTZ, local TIMESTAMP, price DECIMAL(10,2), ok BOOLEAN"
    assert s.to_arrow() == pa.schema([("id", pa.int64()), ("name", pa.string()), ("at", pa.timestamp("us", "UTC")),
                                      ("local", pa.timestamp("us")), ("price", pa.decimal128(10, 2)),
                                      ("ok", pa.bool_())])
    assert parse_schema(s.to_arrow()) == s


def test_arrow_to_duckdb_refuses_what_a_schema_cannot_declare():
    assert arrow_to_duckdb(pa.large_string()) == "VARCHAR"
    assert arrow_to_duckdb(pa.timestamp("ns", "UTC")) == "TIMESTAMPTZ"
    with pytest.raises(ValueError, match="cannot be declared"):
        arrow_to_duckdb(pa.uint64())


@pytest.mark.parametrize("arrow, name", [
    (pa.int8(), "TINYINT"), (pa.int16(), "SMALLINT"), (pa.int32(), "INTEGER"), (pa.int64(), "BIGINT"),
    (pa.float32(), "FLOAT"), (pa.float64(), "DOUBLE"), (pa.string(), "VARCHAR"), (pa.large_string(), "VARCHAR"),
    (pa.bool_(), "BOOLEAN"), (pa.date32(), "DATE"), (pa.binary(), "BLOB"),
    (pa.timestamp("us", "UTC"), "TIMESTAMPTZ"), (pa.timestamp("us"), "TIMESTAMP"),
    # outside the table: Arrow's spelling, as existing checkpoints recorded it
    (pa.decimal128(10, 2), "DECIMAL128(10, 2)"), (pa.uint64(), "UINT64"), (pa.large_binary(), "LARGE_BINARY"),
])
def test_state_schema_names_are_the_recorded_ones(arrow, name):
    assert state_type_name(arrow) == name


def test_state_schema_names_read_back():
    for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.string(),
              pa.bool_(), pa.date32(), pa.binary(), pa.timestamp("us", "UTC"), pa.timestamp("us")):
        assert duckdb_to_arrow(state_type_name(t)) == t
    assert duckdb_to_arrow("timestamp with time zone") == pa.timestamp("us", "UTC")
    assert duckdb_to_arrow("TIMESTAMP") == pa.timestamp("us")      # DuckDB's TIMESTAMP is naive
    assert duckdb_to_arrow("UBIGINT") == pa.uint64()
    for t in (pa.decimal128(10, 2), pa.decimal128(38, 0), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
              pa.large_binary()):      # the names outside the table read back too
        assert duckdb_to_arrow(state_type_name(t)) == t
    assert duckdb_to_arrow("DECIMAL(10,2)") == pa.decimal128(10, 2)
    assert duckdb_to_arrow("STRUCT") is None and duckdb_to_arrow("DECIMAL128(10)") is None   # inferred


def test_nested_types_in_spark_and_duckdb_spelling():
    spark = parse_schema("id BIGINT, e STRUCT<user: STRUCT<id: STRING, `the x` INT>, n INT NOT NULL>, "
                         "tags ARRAY<STRING>, m MAP<STRING, BIGINT>, grid ARRAY<ARRAY<INT>>, p ARRAY<DECIMAL(10, 2)>")
    duck = parse_schema('id BIGINT, e STRUCT("user" STRUCT(id VARCHAR, "the x" INTEGER), n INTEGER), tags VARCHAR[], '
                        "m MAP(VARCHAR, BIGINT), grid INTEGER[][], p DECIMAL(10,2)[]")
    assert spark == duck
    assert spark.to_arrow() == pa.schema([
        ("id", pa.int64()),
        ("e", pa.struct([("user", pa.struct([("id", pa.string()), ("the x", pa.int32())])), ("n", pa.int32())])),
        ("tags", pa.list_(pa.string())), ("m", pa.map_(pa.string(), pa.int64())),
        ("grid", pa.list_(pa.list_(pa.int32()))), ("p", pa.list_(pa.decimal128(10, 2)))])
    assert parse_schema(spark.to_arrow()) == spark
    assert parse_schema("e: STRUCT<a: INT>") == parse_schema("e STRUCT<a INT>")


def test_nested_state_names_read_back():
    t = pa.struct([("id", pa.string()), ("tags", pa.list_(pa.int64())), ("m", pa.map_(pa.string(), pa.float64()))])
    assert state_type_name(t) == 'STRUCT("id" VARCHAR, "tags" BIGINT[], "m" MAP(VARCHAR, DOUBLE))'
    assert duckdb_to_arrow(state_type_name(t)) == t


@pytest.mark.parametrize("text, message", [
    ("a STRUCT<user STRUCT<id STRING>", "expected , or >"),
    ("a ARRAY<>", "expected a type name"),
    ("a MAP<STRING>", "expected ,"),
    ("a FOO", "unknown type 'FOO'"),
    ("a STRUCT<b INT> x", "unexpected 'x'"),
])
def test_bad_nested_types_are_refused_naming_the_spot(text, message):
    with pytest.raises(ValueError, match=message):
        parse_schema(text)

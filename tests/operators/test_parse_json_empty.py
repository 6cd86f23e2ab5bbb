"""parse_json of a batch without rows: the empty table it returns without DuckDB is the one the
DuckDB path (_transform) returns, flat and nested schemas, with kept columns."""
from types import SimpleNamespace

import pyarrow as pa
import pytest

from increments.operators.parse_json import ParseJsonOp
from increments.operators.stateless import ScanOp
from increments.sql import duckdb_connection
from increments.types import parse_schema


@pytest.mark.parametrize("text", ["a STRING, n BIGINT, t TIMESTAMP",
                                  "a STRING, s STRUCT<x: INT, y: ARRAY<STRING>>, m MAP<STRING, DOUBLE>"])
@pytest.mark.parametrize("binary", [True, False])
def test_empty_batch_matches_the_duckdb_path(text, binary):
    schema = parse_schema(text)
    vtype = pa.binary() if binary else pa.string()
    src = pa.schema([("value", vtype), ("topic", pa.string()), ("offset", pa.int64())])
    fields = [pa.field(f.name, f.arrow_type) for f in schema.fields] + [src.field("topic")]
    op = ParseJsonOp(ScanOp(0, src, "test"), schema, "value", ("topic",), None, pa.schema(fields))
    empty = src.empty_table()
    got = op.execute(SimpleNamespace(inputs=[empty]))
    texts = empty.column("value").combine_chunks().cast(pa.string())
    want = op._transform(duckdb_connection(), empty, texts)
    assert got.schema.equals(want.schema, check_metadata=True)
    assert got.num_rows == want.num_rows == 0

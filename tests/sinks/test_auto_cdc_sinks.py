"""The AUTO CDC sinks on their own: an action table applied once per batch id (a redo writes
nothing), NULL keys matched null-safely, the Delta target's properties (its change feed)."""
from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
import sqlalchemy as sa
from deltalake import DeltaTable

from increments.sinks.auto_cdc import AutoCdcDeltaSink
from increments.sinks.auto_cdc_postgres import AutoCdcPostgresSink
from increments.sinks.base import SinkContext

SCD2 = pa.schema([("id", pa.int64()), ("name", pa.string()), ("__start_at", pa.int64()), ("__end_at", pa.int64()),
                  ("__action", pa.string())])


def _actions(rows):
    return pa.Table.from_pylist([dict(zip(SCD2.names, r)) for r in rows], schema=SCD2)


def _sink(kind, tmp_path, pg_url):
    if kind == "delta":
        s = AutoCdcDeltaSink(str(tmp_path / "t"), {"table_properties": {"delta.enableChangeDataFeed": "true"}}, 2,
                             ["id"])
    else:
        s = AutoCdcPostgresSink({"url": pg_url, "table": f"cdc_sink_{uuid.uuid4().hex[:8]}"}, 2, ["id"])
    s.open(SinkContext("qid-1", "q", "append", str(tmp_path / "chk")))
    return s


def _rows(kind, sink):
    if kind == "delta":
        from increments.sinks.delta import read_table
        t, _ = read_table(sink.path)
        got = [tuple(r.values()) for r in t.to_pylist()]
    else:
        with sink.engine().connect() as c:
            got = [tuple(r) for r in c.execute(sa.text(f"SELECT id, name, __start_at, __end_at FROM {sink.table}"))]
    return sorted(got, key=repr)


@pytest.mark.parametrize("kind", ["delta", "postgres"])
def test_each_batch_applied_once_and_null_keys_match(tmp_path, pg_url, kind):
    sink = _sink(kind, tmp_path, pg_url)
    b0 = _actions([(1, "a", 1, None, "upsert"), (None, "n", 1, None, "upsert")])
    b1 = _actions([(1, "a", 1, 5, "upsert"), (1, "b", 5, None, "upsert"), (None, None, 1, None, "delete")])
    assert sink.add_batch(0, b0).num_output_rows == 2
    r = sink.add_batch(1, b1)
    assert r.num_output_rows == 3 and r.extra == {"rows_upserted": 2, "rows_deleted": 1}
    want = [(1, "a", 1, 5), (1, "b", 5, None)]
    assert _rows(kind, sink) == want
    version = DeltaTable(sink.path).version() if kind == "delta" else None
    again = sink.add_batch(1, b1)                          # a redo of batch 1
    assert again.skipped_replay and again.num_output_rows == 0
    fresh = _sink(kind, tmp_path, pg_url) if kind == "delta" else sink   # also from a new process' snapshot
    assert fresh.add_batch(0, b0).skipped_replay
    assert _rows(kind, sink) == want
    if kind == "delta":
        assert DeltaTable(sink.path).version() == version
        assert DeltaTable(sink.path).metadata().configuration["delta.enableChangeDataFeed"] == "true"
        assert DeltaTable(sink.path).transaction_version("qid-1") == 1
    sink.close()

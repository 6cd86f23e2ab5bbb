"""Nested columns (STRUCT, ARRAY, MAP) into every sink: Delta, Parquet and memory keep them as
they are; PostgreSQL flattens structs (as for `window`) and stores arrays and maps as JSONB. Also
as keys in update mode (a STRUCT and an ARRAY key merged batch after batch)."""
from __future__ import annotations

import glob
import json

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from deltalake import DeltaTable

import increments as inc
from increments import functions as F
from increments.types import parse_schema

SCHEMA = "id BIGINT, e STRUCT<user: STRING, n: INT>, tags ARRAY<STRING>, m MAP<STRING, BIGINT>"
ROWS = [{"id": 1, "e": {"user": "a", "n": 1}, "tags": ["x", "y"], "m": [("k", 1)]},
        {"id": 2, "e": None, "tags": [], "m": None},
        {"id": 3, "e": {"user": None, "n": None}, "tags": None, "m": []}]


def _append(fmt, tmp_path, path=None, **opts):
    mem = inc.read_stream.memory(SCHEMA)
    w = mem.write_stream.format(fmt).checkpoint_location(str(tmp_path / f"chk_{fmt}"))
    for k, v in opts.items():
        w = w.option(k, v)
    q = w.start(path) if path else w.start()
    mem.add_data(ROWS[:2])
    q.process_all_available()
    mem.add_data(ROWS[2:])
    q.process_all_available()
    q.stop()
    return q


def _sorted(rows):
    return sorted(rows, key=lambda r: r["id"])


def test_delta_and_parquet_keep_nested_columns(tmp_path):
    _append("delta", tmp_path, str(tmp_path / "delta"))
    t = DeltaTable(str(tmp_path / "delta")).to_pyarrow_table()
    assert t.schema.field("e").type == parse_schema(SCHEMA).to_arrow().field("e").type
    assert _sorted(t.to_pylist()) == ROWS
    _append("parquet", tmp_path, str(tmp_path / "pq"))
    files = sorted(glob.glob(str(tmp_path / "pq" / "**" / "*.parquet"), recursive=True))
    assert _sorted(pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()) == ROWS


def test_memory_sink_keeps_nested_columns(tmp_path):
    _append("memory", tmp_path, query_name="nested_mem_sink")
    got = [r for t in inc.memory_batches("nested_mem_sink").values() for r in t.to_pylist()]
    assert _sorted(got) == ROWS


def test_postgres_stores_arrays_and_maps_as_jsonb(tmp_path, pg_url):
    _append("postgres", tmp_path, url=pg_url, table="nested_rows")
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    with eng.connect() as c:
        types = dict(c.execute(sa.text("SELECT column_name, data_type FROM information_schema.columns "
                                       "WHERE table_name = 'nested_rows'")).all())
        rows = c.execute(sa.text("SELECT id, e_user, e_n, tags, m, tags->>0 FROM nested_rows ORDER BY id")).all()
    assert types == {"id": "bigint", "e_user": "text", "e_n": "integer", "tags": "jsonb", "m": "jsonb"}
    assert [tuple(r) for r in rows] == [(1, "a", 1, ["x", "y"], {"k": 1}, "x"), (2, None, None, [], None, None),
                                        (3, None, None, None, {}, None)]


def test_update_mode_merges_struct_and_array_keys(tmp_path, pg_url):
    def run(fmt, path=None, **opts):
        mem = inc.read_stream.memory(SCHEMA)
        w = (mem.group_by("tags").agg(F.count(), F.max("e")).write_stream.format(fmt).output_mode("update")
             .checkpoint_location(str(tmp_path / f"chk_upd_{fmt}")))
        for k, v in opts.items():
            w = w.option(k, v)
        q = w.start(path) if path else w.start()
        for rows in ([ROWS[0]], [ROWS[0], dict(ROWS[1], tags=["x", "y"], e={"user": "b", "n": 0})]):
            mem.add_data(rows)
            q.process_all_available()
        q.stop()
    run("delta", str(tmp_path / "upd"))
    t = DeltaTable(str(tmp_path / "upd")).to_pyarrow_table()
    assert t.to_pylist() == [{"tags": ["x", "y"], "count": 3, "max(e)": {"user": "b", "n": 0}}]
    run("postgres", url=pg_url, table="nested_upd")
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    with eng.connect() as c:
        rows = c.execute(sa.text('SELECT tags, count, "max(e)_user", "max(e)_n" FROM nested_upd')).all()
    assert [tuple(r) for r in rows] == [(["x", "y"], 3, "b", 0)]

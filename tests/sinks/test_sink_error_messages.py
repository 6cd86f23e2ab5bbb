"""Issue 15 item 8: sink errors that say what to fix (real Delta table, real PostgreSQL)."""
from __future__ import annotations

import json
import os
import uuid

import pyarrow as pa
import pytest
import sqlalchemy as sa
from deltalake import DeltaTable, write_deltalake

import increments as inc


def _files(d, rows_per_file):
    os.makedirs(d, exist_ok=True)
    for k, rows in enumerate(rows_per_file):
        with open(os.path.join(d, f"f{k}.json"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


def _start(inp, chk, **kw):
    return (inc.read_stream.files(inp, "json", "id BIGINT, name STRING", max_files_per_trigger=1).write_stream
            .checkpoint_location(chk).query_name("q").trigger(available_now=True))


def test_delta_table_whose_schema_another_writer_changed_names_the_column(tmp_path):
    inp, chk, out = str(tmp_path / "in"), str(tmp_path / "chk"), str(tmp_path / "out")
    _files(inp, [[{"id": 1, "name": "a"}]])
    _start(inp, chk).format("delta").start(out).await_termination()
    # another writer adds a column
    write_deltalake(out, pa.table({"id": [9], "name": ["z"], "score": [1.5]}), mode="append", schema_mode="merge")
    _files(inp, [[{"id": 1, "name": "a"}], [{"id": 2, "name": "b"}]])
    q = _start(inp, chk).format("delta").start(out)
    with pytest.raises(inc.StreamingQueryException) as ei:
        q.await_termination()
    msg = str(ei.value)
    assert "column 'score' (double) is in the table but not in the query's output" in msg
    assert "another writer may have changed the table" in msg and "batch 1" in msg
    assert sorted(DeltaTable(out).to_pyarrow_table().column("id").to_pylist()) == [1, 9]


def test_a_nul_character_for_the_postgres_sink_names_column_and_row(tmp_path, pg_url):
    inp, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    table = "nul_" + uuid.uuid4().hex[:8]
    _files(inp, [[{"id": 1, "name": "ok"}, {"id": 2, "name": "bad\u0000name"}]])
    q = _start(inp, chk).format("postgres").option("url", pg_url).option("table", table).start()
    with pytest.raises(inc.StreamingQueryException) as ei:
        q.await_termination()
    msg = str(ei.value)
    assert "column 'name' of output row 1 holds a NUL character" in msg and "'id': 2" in msg
    assert f"It came from source 0 (FileStreamSource[{inp}]): input file {inp}/f0.json, line 2." in msg
    assert "replace(name, chr(0), '')" in msg
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    with eng.connect() as c:
        assert not sa.inspect(c).has_table(table) or c.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar() == 0

"""The two ways file_formats runs its one read_json statement give the same tables and the same
failures: a small scan (the statement parsed once per thread, run on the cursor without DuckDB's
optimizer) and a large one (a relation on the default cursor)."""
import json

import pyarrow as pa
import pytest

from increments.sources import file_formats as ff
from increments.types import parse_schema

ROWS = [
    {"id": 1, "name": "a", "score": 1.5, "ok": True, "ts": "2024-01-01 00:00:00", "tags": ["x", "y"],
     "attrs": {"k": 1}, "n": None},
    {"id": 2, "name": None, "score": 3, "ok": False, "ts": "2024-01-01T01:02:03", "tags": [],
     "attrs": {"k": 2}},
    {"id": 3, "name": "c'q", "score": 2.25, "ok": None, "ts": None, "extra": {"x": 1}},
]
SCHEMA = parse_schema("id BIGINT, name STRING, score DOUBLE, ok BOOLEAN, ts TIMESTAMP, "
                      "tags ARRAY<STRING>, attrs STRUCT<k: INT>, n DECIMAL(10,2)")


def _write(path, rows):
    path.write_text("".join((json.dumps(r) if not isinstance(r, str) else r) + "\n" for r in rows))
    return str(path)


def _both(monkeypatch, read):
    small = read()
    monkeypatch.setattr(ff, "SMALL_SCAN_BYTES", -1)
    large = read()
    monkeypatch.setattr(ff, "SMALL_SCAN_BYTES", 1 << 20)
    return small, large


@pytest.mark.parametrize("columns", [None, ["score", "id"], ["tags"]])
def test_small_and_large_scans_agree(tmp_path, monkeypatch, columns):
    p = _write(tmp_path / "a.json", ROWS)
    q = _write(tmp_path / "b.json", ROWS[:1])
    small, large = _both(monkeypatch, lambda: ff.read_json_lines(p, SCHEMA, columns))
    assert small.equals(large) and small.schema == large.schema and small.num_rows == 3
    assert small.column("id").to_pylist() == ([1, 2, 3] if columns != ["tags"] else [None] * 3)
    many = _both(monkeypatch, lambda: ff.read_json_lines_many([p, q], SCHEMA, columns))
    assert many[0].equals(many[1]) and many[0].num_rows == 4


@pytest.mark.parametrize("bad", ['{"id": 3.7}', '{"id": "42"}', '{"ok": "yes"}', '{"id": 1', "[1, 2]"])
def test_small_and_large_scans_fail_alike(tmp_path, monkeypatch, bad):
    p = _write(tmp_path / "bad.json", [ROWS[0], bad])
    small, large = _both(monkeypatch, lambda: ff._read_json_duckdb(p, SCHEMA))
    assert small is None and large is None


def test_a_malformed_small_file_still_names_its_line(tmp_path):
    p = _write(tmp_path / "bad.json", [ROWS[0], ROWS[1], '{"id": true}'])
    with pytest.raises(Exception, match=r"line 3"):
        ff.read_json_lines(p, SCHEMA)


def test_the_statement_is_built_once_per_schema_and_columns():
    assert ff.json_scan_sql(SCHEMA, None) is ff.json_scan_sql(SCHEMA, None)
    assert ff.json_scan_sql(SCHEMA, ("id",)) != ff.json_scan_sql(SCHEMA, None)


def test_this_duckdb_takes_the_small_path(tmp_path):
    """The small path needs the connection's `_result_as_arrow` (else every scan is a relation)."""
    from increments.sql import duckdb_plain_connection
    p = _write(tmp_path / "a.json", ROWS)
    table = ff._small_scan(duckdb_plain_connection(), ff.json_scan_sql(SCHEMA, None), p)
    assert isinstance(table, pa.Table) and table.num_rows == 3

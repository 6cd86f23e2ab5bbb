"""A group whose key is NULL is one group (Spark's result keys are null-safe): in every sink that
upserts, its row is updated in place, never appended again (issue 27 item 5). Per sink (Delta,
PostgreSQL) and output mode (update: MERGE / upsert on the keys; complete: the whole result; append:
each closed window once), a real query with NULL keys, one of two keys NULL, and a NULL group
updated by several batches. A PostgreSQL table whose primary key cannot hold a NULL key fails
the batch naming the key column, writing nothing. (AUTO CDC and Iceberg sinks: test_auto_cdc_sinks.py,
test_iceberg_sink.py.)"""
from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
import pytest
import sqlalchemy as sa

import increments as inc
from increments import functions as F
from increments.sinks.delta import merge_predicate, read_table

SCHEMA = "k STRING, j BIGINT, ts TIMESTAMP"


def _t(minute: int) -> dt.datetime:
    return dt.datetime(2024, 1, 1, 10, minute, tzinfo=dt.timezone.utc)


BATCHES = [
    [{"k": None, "j": 1, "ts": _t(0)}, {"k": None, "j": 1, "ts": _t(1)}, {"k": "a", "j": None, "ts": _t(2)}],
    [{"k": None, "j": 1, "ts": _t(3)}, {"k": "a", "j": None, "ts": _t(4)}, {"k": None, "j": None, "ts": _t(5)}],
    [{"k": None, "j": 1, "ts": _t(30)}, {"k": "b", "j": 2, "ts": _t(31)}],
    [{"k": None, "j": None, "ts": _t(59)}],
]
# every row's (k, j) group, counted over all batches (update and complete modes)
TOTALS = [(None, 1, 4), (None, None, 2), ("a", None, 2), ("b", 2, 1)]
# append: group_by(window(ts, 10 minutes), k, j) with a 5-minute watermark; windows closed by batch 3
WINDOWS = [(_t(0), None, 1, 3), (_t(0), None, None, 1), (_t(0), "a", None, 2), (_t(30), None, 1, 1),
           (_t(30), "b", 2, 1)]


def _key(r):
    return tuple("" if v is None else str(v) for v in r)


def _run(tmp_path, target, mode, pg_url=None, table=None):
    mem = inc.read_stream.memory(SCHEMA)
    if mode == "append":
        frame = mem.with_watermark("ts", "5 minutes").group_by(F.window("ts", "10 minutes"), "k", "j").count()
    else:
        frame = mem.group_by("k", "j").count()
    w = frame.write_stream.output_mode(mode).checkpoint_location(str(tmp_path / f"chk_{target}_{mode}"))
    if target == "delta":
        q = w.format("delta").start(str(tmp_path / f"t_{mode}"))
    else:
        q = w.format("postgres").option("url", pg_url).option("table", table).start()
    try:
        for b in BATCHES:
            mem.add_data(b)
            q.process_all_available()
    finally:
        q.stop()


def _read(tmp_path, target, mode, pg_url=None, table=None):
    if target == "delta":
        rows = read_table(str(tmp_path / f"t_{mode}"))[0].to_pylist()
        if mode == "append":
            return sorted(((r["window"]["start"], r["k"], r["j"], r["count"]) for r in rows), key=_key)
        return sorted(((r["k"], r["j"], r["count"]) for r in rows), key=_key)
    cols = "window_start, k, j, count" if mode == "append" else "k, j, count"
    with sa.create_engine(pg_url, poolclass=sa.pool.NullPool).connect() as c:
        return sorted((tuple(r) for r in c.execute(sa.text(f'SELECT {cols} FROM "{table}"'))), key=_key)


@pytest.mark.parametrize("mode", ["update", "complete", "append"])
@pytest.mark.parametrize("target", ["delta", "postgres"])
def test_a_null_group_is_one_row(tmp_path, pg_url, target, mode):
    table = f"nullkeys_{uuid.uuid4().hex[:8]}"
    _run(tmp_path, target, mode, pg_url, table)
    want = WINDOWS if mode == "append" else TOTALS
    assert _read(tmp_path, target, mode, pg_url, table) == sorted(want, key=_key)


def test_postgres_table_whose_primary_key_cannot_hold_null_fails_naming_the_key(tmp_path, pg_url):
    table = f"nullkeys_pk_{uuid.uuid4().hex[:8]}"
    with sa.create_engine(pg_url, poolclass=sa.pool.NullPool).begin() as c:
        c.execute(sa.text(f'CREATE TABLE "{table}" (k TEXT, j BIGINT, count BIGINT, PRIMARY KEY (k, j))'))
    with pytest.raises(inc.StreamingQueryException) as e:
        _run(tmp_path, "postgres", "update", pg_url, table)
    msg = str(e.value.cause)
    assert "batch 0: the output has a NULL in key column(s) ['k', 'j']" in msg and "UNIQUE NULLS NOT DISTINCT" in msg, msg
    with sa.create_engine(pg_url, poolclass=sa.pool.NullPool).connect() as c:
        assert c.execute(sa.text(f'SELECT count(*) FROM "{table}"')).scalar() == 0


def test_merge_predicate_is_null_safe_only_where_the_batch_has_a_null():
    w = pa.StructArray.from_arrays([pa.array([1, None]), pa.array([2, 3])], ["start", "end"])
    t = pa.table({"k": ["a", None], "j": [1, 2], "window": w})
    assert merge_predicate(t, ["k", "j", "window"]) == (
        "(t.`k` IS NOT DISTINCT FROM s.`k`) AND (t.`j` = s.`j`) AND (t.`window` IS NOT DISTINCT FROM s.`window`)")

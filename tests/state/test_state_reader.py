import datetime as dt

import duckdb
import pyarrow as pa
import pytest

from state_testutil import CONFIGS, IDS, provider_conf
from state import StateStoreError, make_provider, read_state, state_view, write_state_schema
from state.encoding import encode_key, encode_value
from state.schema import read_state_schema

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture(params=CONFIGS, ids=IDS)
def ckpt(request, tmp_path):
    """A checkpoint with operator "agg" (2 partitions, versions 0..2) and a schema."""
    name, changelog = request.param
    path = str(tmp_path / "ckpt")
    with make_provider(name, path, **provider_conf(name, changelog, str(tmp_path / "w"),
                                                   snapshot_interval=2)) as p:
        for part in (0, 1):
            s = p.open("agg", part, -1)
            for v in range(3):
                for m in range(v + 1):
                    window = T0 + dt.timedelta(minutes=m)
                    s.put(encode_key((window, f"g{part}")), encode_value((v * 10 + m, 1.5 * m)))
                s.commit(v)
            s.close()
    write_state_schema(path, "agg", [("window_start", "TIMESTAMPTZ"), ("grp", "VARCHAR")],
                       [("cnt", "BIGINT"), ("total", "DOUBLE")])
    return path


def test_typed_columns_from_schema(ckpt):
    t = read_state(ckpt, "agg")
    assert t.column_names == ["window_start", "grp", "cnt", "total", "_partition"]
    assert t.schema.field("window_start").type == pa.timestamp("us", tz="UTC")
    assert t.schema.field("cnt").type == pa.int64()
    assert t.num_rows == 6
    rows = sorted(t.to_pylist(), key=lambda r: (r["_partition"], r["window_start"]))
    assert rows[0] == {"window_start": T0, "grp": "g0", "cnt": 20, "total": 0.0, "_partition": 0}


def test_versions_and_partition_filter(ckpt):
    assert read_state(ckpt, "agg", version=0).num_rows == 2
    assert read_state(ckpt, "agg", version=1, partition=1).num_rows == 2
    assert read_state(ckpt, "agg", version=-1).num_rows == 0
    with pytest.raises(StateStoreError):
        read_state(ckpt, "agg", version=7)
    with pytest.raises(StateStoreError, match="no state for operator 'nope'"):
        read_state(ckpt, "nope")


def test_raw_columns_without_schema(ckpt, tmp_path):
    import os
    os.remove(os.path.join(ckpt, "state", "agg", "_schema.json"))
    assert read_state_schema(ckpt, "agg") is None
    t = read_state(ckpt, "agg", version=0, partition=0)
    assert t.column_names == ["key", "value", "_partition"]
    assert t.column("key").to_pylist() == [encode_key((T0, "g0"))]


def test_duckdb_view(ckpt):
    con = duckdb.connect()
    state_view(con, "agg_state", ckpt, "agg")
    got = con.sql("select grp, sum(cnt) as c from agg_state group by grp order by grp").fetchall()
    assert got == [("g0", 63), ("g1", 63)]
    assert con.sql("select count(*) from agg_state").to_arrow_table().column(0)[0].as_py() == 6

import datetime as dt

import duckdb
import pyarrow as pa
import pytest

from state_testutil import CONFIGS, IDS, STORAGES, checkpoint_url, provider_conf, store_names
from state import StateStoreError, make_provider, read_state, state_view, write_state_schema
from state.encoding import encode_key, encode_value
from state.schema import read_state_schema

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture(params=[(c, s) for s in STORAGES for c in CONFIGS], ids=[f"{i}-{s}" for s in STORAGES for i in IDS])
def ckpt(request, tmp_path):
    """A checkpoint (local or on S3) with operator "agg" (2 partitions, versions 0..2) and a schema."""
    (name, changelog), storage = request.param
    path = checkpoint_url(request, tmp_path, storage)
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
    from increments import storage
    storage.location(ckpt).child("state", "agg").delete("_schema.json")
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


def test_schema_is_written_once_and_replaced_only_when_it_changes(ckpt):
    from increments import storage
    loc = storage.location(ckpt)
    before = loc.child("state", "agg").read_bytes("_schema.json")
    write_state_schema(loc, "agg", [("window_start", "TIMESTAMPTZ"), ("grp", "VARCHAR")],
                       [("cnt", "BIGINT"), ("total", "DOUBLE")])            # another attempt, same query
    assert loc.child("state", "agg").read_bytes("_schema.json") == before
    write_state_schema(ckpt, "agg", [("k", "VARCHAR")], [("v", "BIGINT")])   # a changed query
    assert read_state_schema(loc, "agg") == {"key": [["k", "VARCHAR"]], "value": [["v", "BIGINT"]]}


def test_tokens_pick_the_attempt_of_a_redone_version(ckpt, tmp_path):
    name = "memory" if any(n.endswith(".delta") for n in store_names(ckpt, "agg", 0)) else "rocksdb"
    with make_provider(name, ckpt, local_dir=str(tmp_path / "redo")) as p:
        s = p.open("agg", 0, 1)
        s.put(encode_key((T0, "redo")), encode_value((1, 1.0)))
        s.commit(2)
        redo = s.token
    with pytest.raises(StateStoreError, match="pass the token"):
        read_state(ckpt, "agg", version=2)
    t = read_state(ckpt, "agg", version=2, partition=0, tokens={0: redo})
    assert "redo" in t.column("grp").to_pylist() and t.num_rows == 3


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_a_partition_left_untouched_reads_at_every_version(request, tmp_path, storage, config):
    """Partition 1 changes only at version 0; versions 1..3 of it have no file (derived tokens).
    With the commit log's tokens every version reads exactly; without them, a partition with no
    file at the version reads at its newest version below, the same content."""
    name, changelog = config
    path = checkpoint_url(request, tmp_path, storage)
    tokens: dict[int, dict[int, str]] = {}
    with make_provider(name, path, **provider_conf(name, changelog, str(tmp_path / "w"),
                                                   snapshot_interval=10)) as p:
        stores = [p.open("agg", part, -1) for part in (0, 1)]
        for v in range(4):
            stores[0].put(encode_key((T0, f"v{v}")), encode_value((v, 0.0)))
            if v == 0:
                stores[1].put(encode_key((T0, "only")), encode_value((7, 0.0)))
            for part, s in enumerate(stores):
                s.commit(v)
                tokens.setdefault(v, {})[part] = s.token
        for s in stores:
            s.close()
    assert "~" in tokens[3][1] and not [n for n in store_names(path, "agg", 1) if n.startswith("3.")]
    for v in range(4):
        for toks in (tokens[v], None):
            t = read_state(path, "agg", version=v, tokens=toks)
            assert sorted(t.column("_partition").to_pylist()) == [0] * (v + 1) + [1], (v, toks)
    # version=None without tokens: the newest version every partition has files for (0 here; at most
    # snapshot_interval - 1 behind, as versions due for a snapshot are always written)
    assert read_state(path, "agg").num_rows == 2

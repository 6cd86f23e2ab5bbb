"""format("delta"): append / update / complete, each batch once per (query id, batch id)."""
from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import increments as inc
from increments.sinks.base import SinkContext
from increments.sinks.delta import DeltaSink


def _sink(path, mode, keys=(), qid="q-1"):
    s = DeltaSink(str(path), {})
    s.open(SinkContext(qid, "q", mode, "/unused", list(keys)))
    return s


def _rows(path, *cols):
    t = DeltaTable(str(path)).to_pyarrow_table()
    return sorted(zip(*(t.column(c).to_pylist() for c in cols)))


def test_query_appends_to_delta_and_reports_table_version(tmp_path):
    mem = inc.read_stream.memory("id BIGINT, name STRING")
    q = (mem.filter("id > 0").select("id", "upper(name) AS name")
         .write_stream.format("delta").output_mode("append").checkpoint_location(str(tmp_path / "chk"))
         .start(str(tmp_path / "out")))
    mem.add_data([{"id": 1, "name": "a"}, {"id": 0, "name": "z"}])
    q.process_all_available()
    mem.add_data([{"id": 2, "name": "b"}])
    q.process_all_available()
    q.stop()
    assert _rows(tmp_path / "out", "id", "name") == [(1, "A"), (2, "B")]
    dt = DeltaTable(str(tmp_path / "out"))
    assert dt.transaction_version(q.id) == 1
    assert q.last_progress["batch_id"] == 1


def test_append_replay_of_a_batch_is_skipped(tmp_path):
    s = _sink(tmp_path / "t", "append")
    batch = pa.table({"id": [1, 2]})
    r0 = s.add_batch(0, batch)
    assert (r0.num_output_rows, r0.version, r0.skipped_replay) == (2, 0, False)
    r1 = s.add_batch(1, pa.table({"id": [3]}))
    again = s.add_batch(1, pa.table({"id": [3]}))          # redo after a crash before commits[1]
    assert again.skipped_replay and again.version == r1.version
    assert s.add_batch(0, batch).skipped_replay
    assert _rows(tmp_path / "t", "id") == [(1,), (2,), (3,)]
    # another query writing the same table has its own transaction id
    other = _sink(tmp_path / "t", "append", qid="q-2")
    assert not other.add_batch(0, pa.table({"id": [9]})).skipped_replay
    assert _rows(tmp_path / "t", "id") == [(1,), (2,), (3,), (9,)]


def test_update_merges_on_keys_and_replay_is_a_no_op(tmp_path):
    s = _sink(tmp_path / "t", "update", keys=["k"])
    s.add_batch(0, pa.table({"k": ["a", "b"], "count": [1, 1]}))
    s.add_batch(1, pa.table({"k": ["b", "c"], "count": [2, 1]}))
    assert s.add_batch(1, pa.table({"k": ["b", "c"], "count": [2, 1]})).skipped_replay
    assert _rows(tmp_path / "t", "k", "count") == [("a", 1), ("b", 2), ("c", 1)]


def test_update_with_window_struct_key(tmp_path):
    from datetime import datetime, timezone
    w = pa.StructArray.from_arrays([pa.array([datetime(2024, 1, 1, h, tzinfo=timezone.utc) for h in (0, 1)],
                                             pa.timestamp("us", tz="UTC")),
                                    pa.array([datetime(2024, 1, 1, h + 1, tzinfo=timezone.utc) for h in (0, 1)],
                                             pa.timestamp("us", tz="UTC"))], ["start", "end"])
    s = _sink(tmp_path / "t", "update", keys=["window", "c"])
    s.add_batch(0, pa.table({"window": w, "c": ["x", "x"], "count": [1, 5]}))
    s.add_batch(1, pa.table({"window": w.slice(0, 1), "c": ["x"], "count": [3]}))
    t = DeltaTable(str(tmp_path / "t")).to_pyarrow_table()
    assert sorted(t.column("count").to_pylist()) == [3, 5]


def test_complete_overwrites_in_one_commit(tmp_path):
    s = _sink(tmp_path / "t", "complete", keys=["k"])
    s.add_batch(0, pa.table({"k": ["a"], "count": [1]}))
    v0 = DeltaTable(str(tmp_path / "t")).version()
    r = s.add_batch(1, pa.table({"k": ["a", "b"], "count": [2, 1]}))
    assert r.version == v0 + 1
    assert s.add_batch(1, pa.table({"k": ["a", "b"], "count": [2, 1]})).skipped_replay
    assert _rows(tmp_path / "t", "k", "count") == [("a", 2), ("b", 1)]


@pytest.mark.parametrize("mode", ["append", "update", "complete"])
def test_a_sink_behind_another_writer_of_its_query_writes_each_batch_once(tmp_path, mode):
    """Two runs of one query (a zombie and the run that replaced it) each keep their own snapshot
    of the table. When the other run committed a batch after this sink's snapshot, this sink's
    commit is refused (same app id), it reloads, and skips the batch the other wrote -- or writes a
    later batch on the current table."""
    keys = ["k"] if mode != "append" else []
    zombie, live = _sink(tmp_path / "t", mode, keys), _sink(tmp_path / "t", mode, keys)
    assert zombie.add_batch(0, pa.table({"k": ["a"], "count": [1]})).num_output_rows == 1
    assert live.add_batch(0, pa.table({"k": ["a"], "count": [1]})).skipped_replay
    assert live.add_batch(1, pa.table({"k": ["b"], "count": [1]})).num_output_rows == 1
    # the zombie's snapshot still says batch 0: its redo of batch 1 must not write again
    again = zombie.add_batch(1, pa.table({"k": ["b"], "count": [1]}))
    assert again.skipped_replay and again.version == DeltaTable(str(tmp_path / "t")).version()
    expected = [("a", 1), ("b", 1)] if mode != "complete" else [("b", 1)]
    assert _rows(tmp_path / "t", "k", "count") == expected
    # a batch the other run has not written: written once, on top of the other run's commit
    live.add_batch(2, pa.table({"k": ["c"], "count": [1]}))
    r = zombie.add_batch(3, pa.table({"k": ["d"], "count": [1]}))
    assert r.num_output_rows == 1 and not r.skipped_replay
    expected = {"append": [("a", 1), ("b", 1), ("c", 1), ("d", 1)], "update": [("a", 1), ("b", 1), ("c", 1), ("d", 1)],
                "complete": [("d", 1)]}[mode]
    assert _rows(tmp_path / "t", "k", "count") == expected
    assert DeltaTable(str(tmp_path / "t")).transaction_version("q-1") == 3
    assert live.add_batch(3, pa.table({"k": ["d"], "count": [1]})).skipped_replay


def test_reopened_sink_forgets_its_snapshot(tmp_path):
    """open() for another query id (a new checkpoint) must not reuse the last batch id of the
    query the sink wrote before."""
    s = _sink(tmp_path / "t", "append")
    s.add_batch(5, pa.table({"id": [1]}))
    s.open(SinkContext("q-2", "q", "append", "/unused", []))
    assert not s.add_batch(0, pa.table({"id": [2]})).skipped_replay
    assert _rows(tmp_path / "t", "id") == [(1,), (2,)]


def test_delta_sink_needs_a_path(tmp_path):
    mem = inc.read_stream.memory("id BIGINT")
    with pytest.raises(ValueError, match="needs a table path"):
        mem.write_stream.format("delta").checkpoint_location(str(tmp_path / "chk")).start()


def test_foreach_batch_two_tables_example_runs(tmp_path):
    """The example exits 0, deterministically: it runs with every pyarrow Python filesystem made to
    fail (what DeltaTable.to_pyarrow_table builds, the cause of the 1-in-6 abort at exit of
    tests/sinks/test_delta_exit.py), so a read path that could abort fails every run."""
    import subprocess
    import sys
    root = __file__.rsplit("/tests/", 1)[0]
    trap = ("import pyarrow.fs, runpy, sys\n"
            "def _trap(*a, **k):\n"
            "    raise AssertionError('a pyarrow Python filesystem was built (it can abort the exit)')\n"
            "pyarrow.fs.PyFileSystem = _trap\n"
            f"sys.argv = ['foreach_batch_two_tables.py', {str(tmp_path)!r}]\n"
            f"runpy.run_path({root + '/examples/foreach_batch_two_tables.py'!r}, run_name='__main__')\n")
    p = subprocess.run([sys.executable, "-c", trap], capture_output=True, text=True, timeout=120, cwd=root)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "all_orders: 15 rows, last batch 2" in p.stdout and "big_orders: 6 rows, last batch 2" in p.stdout


def test_another_writer_retyping_a_column_is_refused_like_other_drift(tmp_path):
    """Issue 28 item 9: another writer overwrites the sink's BIGINT column as STRING (schema
    overwrite) while the query runs; the next batch is refused naming the column, its values never
    land as strings; restoring the schema lets the query go on, each row once."""
    import json as _json

    from deltalake import write_deltalake

    from increments.errors import SinkSchemaError
    inp, chk, out = tmp_path / "in", str(tmp_path / "chk"), str(tmp_path / "out")
    inp.mkdir()

    def put(name, ids):
        (inp / name).write_text("".join(_json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids))

    def start():
        return (inc.read_stream.files(str(inp), "json", "id BIGINT, name STRING", max_files_per_trigger=1)
                .write_stream.format("delta").checkpoint_location(chk).query_name("retyped")
                .trigger(processing_time="100 milliseconds").start(out))
    put("a.json", [1, 2])
    q = start()
    q.process_all_available()
    kept = DeltaTable(out).to_pyarrow_table()
    write_deltalake(out, kept.set_column(0, "id", kept.column("id").cast(pa.string())), mode="overwrite",
                    schema_mode="overwrite")                       # the other writer
    put("b.json", [3])
    with pytest.raises(inc.StreamingQueryException) as ei:
        q.process_all_available()
    assert isinstance(ei.value.cause, SinkSchemaError)
    assert "column 'id' is string in the table but int64 in the output" in str(ei.value)
    t = DeltaTable(out).to_pyarrow_table()
    assert t.schema.field("id").type == pa.string() and sorted(t.column("id").to_pylist()) == ["1", "2"]
    write_deltalake(out, kept, mode="overwrite", schema_mode="overwrite")   # the schema restored
    q = start()
    q.process_all_available()
    q.stop()
    assert sorted(DeltaTable(out).to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3]

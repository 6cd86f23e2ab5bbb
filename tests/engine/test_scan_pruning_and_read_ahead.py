"""A file scan decodes only the columns the query reads, and decodes the next batches' files ahead
of time; neither may change what a batch reads or how bad input fails it.

- Pruning (plan/compiler.py prune_scans): scan -> with_watermark -> group_by(...).agg(...) reads
  only the key, event-time and aggregated columns; other queries read every column.
- Read-ahead (sources/prefetch.py): a result is used only for the same file, unchanged since the
  read began; a failed read-ahead is simply read again by the batch that owns the file, which fails
  naming file and line as without read-ahead.
"""
from __future__ import annotations

import json
import os

import pytest

import increments as inc
from increments import functions as F
from increments.plan.compiler import Compiler
from increments.sources.files import FileSource

SCHEMA = "campaign_id STRING, user_id STRING, amount BIGINT, event_time TIMESTAMP"


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rows(k, n=3):
    return [{"campaign_id": f"c{i % 2}", "user_id": f"u{k}-{i}", "amount": i,
             "event_time": f"2026-11-01T{k:02d}:{10 + i:02d}:00Z"} for i in range(n)]


def _hourly(src):
    return src.with_watermark("event_time", "15 minutes").group_by(F.window("event_time", "1 hour"), "campaign_id")


def test_aggregation_scans_only_the_columns_it_reads(tmp_path):
    src = inc.read_stream.files(str(tmp_path), "json", SCHEMA)
    counted = Compiler("append").compile(_hourly(src).count()._node)
    summed = Compiler("update").compile(_hourly(src).agg(F.sum("amount"))._node)
    projected = Compiler("append").compile(src.select("user_id")._node)
    assert counted.scan_columns == {0: ["campaign_id", "event_time"]}
    assert summed.scan_columns == {0: ["campaign_id", "amount", "event_time"]}
    assert projected.scan_columns == {}     # an operator that does not say what it reads gets every column


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_pruned_scan_gives_the_same_batches_and_input_counts(tmp_path, fmt):
    import pyarrow as pa
    import pyarrow.parquet as pq
    d = tmp_path / "in"
    d.mkdir()
    for k in range(4):
        rows = _rows(k)
        if fmt == "json":
            _write(d / f"f{k}.json", rows)
        else:
            t = pa.Table.from_pylist(rows)
            t = t.set_column(3, "event_time", pa.array([int((1793491200 + k * 3600 + (10 + i) * 60) * 1e6) for i in range(3)],
                                                       pa.timestamp("us", tz="UTC")))
            pq.write_table(t, d / f"f{k}.parquet")
    outs = {}
    for prune in (True, False):
        got, chk = {}, tmp_path / f"chk-{prune}"
        src = inc.read_stream.files(str(d), fmt, SCHEMA, max_files_per_trigger=1)
        q = (_hourly(src).agg(F.count(), F.sum("amount")).write_stream.output_mode("append")
             .foreach_batch(lambda t, b, got=got: got.__setitem__(b, sorted(map(str, t.to_pylist()))))
             .checkpoint_location(str(chk)).trigger(available_now=True))
        if not prune:   # the same query with the scan unpruned: a select of every column after the scan
            src2 = inc.read_stream.files(str(d), fmt, SCHEMA, max_files_per_trigger=1).select("*")
            q = (_hourly(src2).agg(F.count(), F.sum("amount")).write_stream.output_mode("append")
                 .foreach_batch(lambda t, b, got=got: got.__setitem__(b, sorted(map(str, t.to_pylist()))))
                 .checkpoint_location(str(chk)).trigger(available_now=True))
        sq = q.start()
        sq.await_termination()
        outs[prune] = (got, [p["num_input_rows"] for p in sq.recent_progress])
    assert outs[True] == outs[False]
    assert outs[True][1] == [3, 3, 3, 3, 0]
    # W ends at 03:12 - 15 min: hours 0 and 1 are closed and emitted (x 2 campaigns), 2 and 3 stay open
    assert sum(len(v) for v in outs[True][0].values()) == 4


def test_pruned_json_scan_still_fails_on_invalid_json_naming_file_and_line(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    _write(d / "a.json", _rows(1))
    (d / "b.json").write_text(json.dumps(_rows(2)[0]) + "\n" + '{"campaign_id": "c1", "user_id": \n')
    q = (_hourly(inc.read_stream.files(str(d), "json", SCHEMA, max_files_per_trigger=1)).count().write_stream
         .foreach_batch(lambda t, b: None).checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True).start())
    with pytest.raises(inc.StreamingQueryException) as ei:
        q.await_termination()
    assert f"file {d / 'b.json'}, line 2" in str(ei.value) and "batch 1" in str(ei.value)


def _source(tmp_path, n_files):
    d = tmp_path / "in"
    d.mkdir()
    for k in range(n_files):
        _write(d / f"f{k}.json", _rows(k))
    src = FileSource(str(d), "json", SCHEMA, max_files_per_trigger=1)
    src.open(str(tmp_path / "chk"), 0, "q")
    src.enable_read_ahead()          # as the local runner does
    return d, src


def _ids(table):
    return table.column("user_id").to_pylist()


def test_read_ahead_result_is_dropped_when_the_file_changed(tmp_path):
    d, src = _source(tmp_path, 3)
    assert src.latest_offset(-1) == 0
    assert _ids(src.read(-1, 0)) == ["u0-0", "u0-1", "u0-2"]   # f1 and f2 are being read ahead
    ahead = src._read_ahead
    assert ahead.taken == 1                                      # batch 0's own file, decoded at plan
    assert ahead.wait("f1.json", 30) and ahead.wait("f2.json", 30)
    _write(d / "f1.json", _rows(7, n=2))                          # rewritten (another size) after its read-ahead
    assert src.latest_offset(0) == 1
    assert _ids(src.read(0, 1)) == ["u7-0", "u7-1"]
    assert (ahead.taken, ahead.discarded) == (1, 1)              # the stale result was dropped
    assert src.latest_offset(1) == 2
    assert _ids(src.read(1, 2)) == ["u2-0", "u2-1", "u2-2"]
    assert (ahead.taken, ahead.discarded) == (2, 1)              # read ahead, unchanged: used


def test_failed_read_ahead_fails_the_owning_batch_naming_file_and_line(tmp_path):
    d, src = _source(tmp_path, 2)
    (d / "f1.json").write_text(json.dumps(_rows(1)[0]) + "\n" + "not json\n")
    assert src.latest_offset(-1) == 0
    src.read(-1, 0)
    assert src._read_ahead.wait("f1.json", 30)                  # its read-ahead ran, and failed
    assert src.latest_offset(0) == 1
    with pytest.raises(inc.errors.MalformedInputError, match=r"f1\.json, line 2"):
        src.read(0, 1)
    assert src._read_ahead.discarded == 1                        # the batch read the file itself


@pytest.mark.parametrize("columns", [["campaign_id", "event_time"], None, ["user_id"]])
def test_parquet_read_ahead_decodes_stored_dictionaries_to_the_same_table(tmp_path, monkeypatch, columns):
    """A Parquet file's dictionary-encoded strings are read ahead as dictionaries and decoded by a
    cast (less CPU than Arrow's string reader): the table is the one the batch's own read gives --
    values, nulls, types and one chunk per column --, several row groups (a dictionary each), a
    plain-encoded string column and a declared column the file lacks (the usual read raises) alike."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from increments.sources import file_formats, file_read_ahead
    from increments.types import parse_schema
    monkeypatch.setattr(file_read_ahead, "DICTIONARY_READ_MIN_BYTES", 0)     # (a small file is read as usual)
    d = tmp_path / "in"
    d.mkdir()
    n = 7000
    table = pa.table({
        "campaign_id": [None if i % 13 == 0 else f"c{i % 9}" for i in range(n)],
        "user_id": [f"u{i}" for i in range(n)],
        "amount": pa.array(range(n), pa.int64()),
        "event_time": pa.array([1793491200 * 10**6 + i for i in range(n)], pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, d / "groups.parquet", row_group_size=2000)
    pq.write_table(table, d / "plain.parquet", use_dictionary=["campaign_id"])    # user_id PLAIN
    pq.write_table(table.drop_columns(["amount"]), d / "missing.parquet")
    src = FileSource(str(d), "parquet", SCHEMA, max_files_per_trigger=1)
    schema = parse_schema(SCHEMA)
    for name in ("groups.parquet", "plain.parquet"):
        ahead = src._decode_parquet_dictionary(name, columns)
        read = file_formats.read_parquet(str(d / name), schema, columns)
        if name == "plain.parquet" and columns == ["user_id"]:
            assert ahead is None                                  # nothing stored as a dictionary: the usual read
            continue
        assert ahead.schema == read.schema and ahead.equals(read)
        assert [c.num_chunks for c in ahead.columns] == [c.num_chunks for c in read.columns]
    assert src._decode_parquet_dictionary("missing.parquet", columns) is None
    with pytest.raises(inc.errors.MalformedInputError, match="amount"):
        src._decode_ahead("missing.parquet", columns)
    monkeypatch.undo()
    assert src._decode_parquet_dictionary("groups.parquet", columns) is None     # small: not worth a second open


def test_file_deleted_after_its_read_ahead_is_data_loss(tmp_path):
    d, src = _source(tmp_path, 2)
    assert src.latest_offset(-1) == 0
    src.read(-1, 0)
    assert src.latest_offset(0) == 1
    assert src._read_ahead.wait("f1.json", 30)                  # decoded ahead, then deleted
    os.remove(d / "f1.json")
    with pytest.raises(inc.errors.DataLossError, match=r"f1\.json was listed for this batch but is gone"):
        src.read(0, 1)
    assert src._read_ahead.discarded == 1                        # the decoded rows were not used


def test_read_ahead_is_bounded_by_the_bytes_of_the_next_batches(tmp_path, monkeypatch):
    import increments.sources.file_read_ahead as read_ahead_mod
    d, src = _source(tmp_path, 4)
    size = os.path.getsize(d / "f1.json")
    monkeypatch.setattr(read_ahead_mod, "READ_AHEAD_BYTES", size)     # room for one file ahead, not two
    started = []
    monkeypatch.setattr(src._read_ahead, "start", lambda paths, cols, read: started.append(list(paths)))
    assert src.latest_offset(-1) == 0
    assert [os.path.basename(p) for p in started[-1]] == ["f0.json", "f1.json"]   # this batch's file + one ahead


_FAILING_QUERY = """
import sys
import increments as inc
q = (inc.read_stream.files(sys.argv[1], "json", "campaign_id STRING, user_id STRING, amount BIGINT, event_time TIMESTAMP",
                           max_files_per_trigger=1)
     .select("campaign_id").write_stream.foreach_batch(lambda t, b: None).checkpoint_location(sys.argv[2])
     .trigger(available_now=True).start())
try:
    q.await_termination()
except inc.StreamingQueryException as e:
    print(e)
"""


def test_a_query_failing_while_reading_ahead_exits_cleanly(tmp_path):
    """Batch 1's file is malformed while the next (large) files are being decoded ahead: the
    process reports the bad file and exits normally (a decode torn down at exit used to abort it)."""
    import subprocess
    import sys
    d = tmp_path / "in"
    d.mkdir()
    _write(d / "f0.json", _rows(0))
    (d / "f1.json").write_text("not json\n")
    big = "".join(json.dumps(r) + "\n" for r in _rows(3, n=50)) * 2000     # 100k rows each
    for k in (2, 3, 4):
        (d / f"f{k}.json").write_text(big)
    script = tmp_path / "failing_query.py"
    script.write_text(_FAILING_QUERY)
    for attempt in range(5):
        p = subprocess.run([sys.executable, str(script), str(d), str(tmp_path / f"chk{attempt}")],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        assert f"file {d / 'f1.json'}, line 1" in p.stdout


def test_aggregation_partials_prepared_while_reading_ahead_give_the_same_output(tmp_path, monkeypatch):
    """scan -> with_watermark -> group_by(window, key): the local runner computes each file's
    partials on the read-ahead thread (WindowAggregateOp.prepare); the batches reuse them and emit
    exactly what computing them in the batch emits."""
    import increments.execution.query as query_mod
    d = tmp_path / "in"
    d.mkdir()
    for k in range(6):
        rows = _rows(k, n=4) + [{"campaign_id": "c9", "user_id": "late", "amount": 1,
                                 "event_time": "2026-11-01T00:05:00Z"}]
        _write(d / f"f{k}.json", rows)

    def run(name):
        out = []
        q = (_hourly(inc.read_stream.files(str(d), "json", SCHEMA, max_files_per_trigger=1)).count()
             .write_stream.output_mode("append").option("state_partitions", 2)
             .foreach_batch(lambda t, b: out.append((b, sorted(map(str, t.to_pylist())))))
             .checkpoint_location(str(tmp_path / name)).trigger(available_now=True).start())
        q.await_termination()
        return out, q.runtime.plan.root, [p["num_input_rows"] for p in q.recent_progress]
    prepared, op, counts = run("chk_prepared")
    assert op.prepared_used == 6                    # every batch reused the partials of its file
    monkeypatch.setattr(query_mod, "_prepare_hook", lambda rt, index: None)
    computed, op2, counts2 = run("chk_computed")
    assert op2.prepared_used == 0
    assert prepared == computed and counts == counts2
    assert sum(len(rows) for _, rows in prepared) > 0


def test_the_next_seen_files_entry_is_written_ahead_and_adopted_by_its_plan(tmp_path):
    """With read-ahead (the local runner) and a backlog, plan N also writes entry N+1 in the
    background; plan N+1 waits for that durable write and takes exactly those files."""
    d, src = _source(tmp_path, 3)
    entries = tmp_path / "chk" / "sources" / "0"
    assert src.latest_offset(-1) == 0
    src._entry_ahead[1].result(30)
    assert sorted(os.listdir(entries)) == ["0.json", "1.json"]        # entry 1 written ahead
    ahead = json.loads((entries / "1.json").read_text())
    assert [f["name"] for f in ahead["files"]] == ["f1.json"]
    assert src.latest_offset(0) == 1 and src.files_for(0, 1) == ["f1.json"]
    assert json.loads((entries / "1.json").read_text()) == ahead        # adopted as written
    assert _ids(src.read(0, 1)) == ["u1-0", "u1-1", "u1-2"]
    assert src.latest_offset(1) == 2 and src.files_for(1, 2) == ["f2.json"]
    assert src._entry_ahead is None                                     # nothing left to write ahead
    assert src.latest_offset(2) == 2
    src.close()

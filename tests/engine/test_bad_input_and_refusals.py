"""Malformed files fail the batch naming file and line, and nothing is marked seen that was not
processed; the planner refuses what streaming cannot do before any batch runs."""
from __future__ import annotations

import json
import os

import pytest

import increments as inc
from increments import functions as F

SCHEMA = "id BIGINT, name STRING"


def _start(d, chk, fn, **kw):
    return (inc.read_stream.files(str(d), "json", SCHEMA, max_files_per_trigger=1).select("id", "name")
            .write_stream.foreach_batch(fn).checkpoint_location(str(chk)).trigger(available_now=True).start())


@pytest.mark.parametrize("bad_line,reason", [
    ('{"id": 3, "name": "x"', "invalid JSON"),
    ('{"id": "three", "name": "x"}', "field 'id' is \"three\", which is not a BIGINT"),
])
def test_malformed_row_fails_batch_naming_file_and_line_then_recovers(tmp_path, bad_line, reason):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text('{"id": 1, "name": "a"}\n')
    bad = d / "b.json"
    bad.write_text('{"id": 2, "name": "b"}\n\n' + bad_line + "\n")
    got = {}

    def fn(t, b):
        got[b] = t.column("id").to_pylist()
    q = _start(d, tmp_path / "chk", fn)
    with pytest.raises(inc.StreamingQueryException) as ei:
        q.await_termination()
    msg = str(ei.value)
    assert f"file {bad}, line 3" in msg and reason in msg and "batch 1" in msg and "read step" in msg
    assert got == {0: [1]}
    # the user fixes the file; the restart redoes batch 1 with it: nothing was skipped
    bad.write_text('{"id": 2, "name": "b"}\n{"id": 3, "name": "c"}\n')
    q = _start(d, tmp_path / "chk", fn)
    q.await_termination()
    assert got == {0: [1], 1: [2, 3]}


def test_deleted_file_is_data_loss_unless_allowed(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text('{"id": 1, "name": "a"}\n')

    class Remove(inc.StreamingQueryListener):
        def on_batch_step(self, name, batch_id, step):
            if step == "plan" and (d / "a.json").exists():
                os.remove(d / "a.json")
    q = (inc.read_stream.files(str(d), "json", SCHEMA).select("id").write_stream.foreach_batch(lambda t, b: None)
         .listener(Remove()).checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True).start())
    with pytest.raises(inc.StreamingQueryException, match=r"a\.json was listed for this batch but is gone"):
        q.await_termination()
    q = (inc.read_stream.files(str(d), "json", SCHEMA, fail_on_data_loss=False).select("id")
         .write_stream.foreach_batch(lambda t, b: None).checkpoint_location(str(tmp_path / "chk"))
         .trigger(available_now=True).start())
    q.await_termination()
    assert q.last_progress["sources"][0]["skipped_files"] == [str(d / "a.json")]


def test_empty_file_is_an_empty_batch(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text("")
    got = {}
    q = _start(d, tmp_path / "chk", lambda t, b: got.setdefault(b, t.num_rows))
    q.await_termination()
    assert got == {0: 0}


def _stream(tmp_path):
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    return inc.read_stream.files(str(d), "json", "id BIGINT, ts TIMESTAMP")


@pytest.mark.parametrize("build,mode,match", [
    (lambda s: s.order_by("id"), "append", "sorting is not supported"),
    (lambda s: s.limit(5), "append", "limit is not supported"),
    (lambda s: s.select("id"), "complete", "complete output mode is not supported when there are no streaming aggregations"),
    (lambda s: s.select("no_such_column"), "append", "no_such_column"),
    (lambda s: s.select("id"), "sideways", "output mode 'sideways'"),
])
def test_planner_refuses_before_any_batch(tmp_path, build, mode, match):
    ran = []
    with pytest.raises(inc.AnalysisException, match=match):
        (build(_stream(tmp_path)).write_stream.output_mode(mode).foreach_batch(lambda t, b: ran.append(b))
         .checkpoint_location(str(tmp_path / "chk")).start())
    assert ran == []


def test_append_aggregation_without_watermark_names_the_fix(tmp_path):
    s = _stream(tmp_path)
    with pytest.raises(inc.AnalysisException, match="with_watermark"):
        (s.group_by(F.window("ts", "1 hour")).count().write_stream.output_mode("append")
         .foreach_batch(lambda t, b: None).checkpoint_location(str(tmp_path / "chk")).start())


def test_changed_state_partitions_are_refused_naming_both_values(tmp_path):
    s = _stream(tmp_path)
    (s.select("id").write_stream.format("memory").query_name("parts").option("state_partitions", 4)
     .checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True).start().await_termination())
    with pytest.raises(inc.IncompatibleCheckpointError, match="state_partitions: checkpoint has 4, this start asks for 8"):
        (s.select("id").write_stream.format("memory").query_name("parts").option("state_partitions", 8)
         .checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True).start())
    with pytest.raises(inc.IncompatibleCheckpointError, match="state_store: checkpoint has 'rocksdb', this start asks for 'memory'"):
        (s.select("id").write_stream.format("memory").query_name("parts").option("state_store", "memory")
         .option("state_partitions", 4).checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True).start())

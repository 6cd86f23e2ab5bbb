"""Issue 28 item 1: a file that changes after a later batch than the next one is caught too: every
plan checks the last `changed_files_window` files read (one listing), also the plan of an idle
trigger (no new file), and fails naming the file as the previous-batch check does; with
fail_on_data_loss=False it goes on, warns once and reports the file in the next batch's metrics.
Local disk and the moto S3 server."""
from __future__ import annotations

import json
import logging
import os

import pytest
from deltalake import DeltaTable

import increments as inc
from increments import storage
from increments.errors import DataLossError


def _rows(start, n):
    return "".join(json.dumps({"id": start + i, "name": "r"}) + "\n" for i in range(n))


def _start(inp, chk, out, trigger=None, **src):
    w = (inc.read_stream.files(inp, "json", "id BIGINT, name STRING", max_files_per_trigger=1, **src)
         .write_stream.format("delta").checkpoint_location(chk).query_name("window"))
    return w.trigger(**(trigger or {"available_now": True})).start(out)


def _run(*a, **kw):
    q = _start(*a, **kw)
    q.await_termination()
    return q


def _ids(out):
    return sorted(DeltaTable(out).to_pyarrow_table().column("id").to_pylist())


@pytest.fixture
def d(tmp_path):
    os.makedirs(tmp_path / "in")
    return str(tmp_path / "in"), str(tmp_path / "chk"), str(tmp_path / "out")


def test_a_file_changed_two_batches_later_fails_naming_it(d, caplog):
    inp, chk, out = d
    with open(f"{inp}/a.json", "w") as f:
        f.write(_rows(0, 10))
    _run(inp, chk, out)
    with open(f"{inp}/b.json", "w") as f:
        f.write(_rows(100, 1))
    _run(inp, chk, out)
    with open(f"{inp}/a.json", "a") as f:          # 30 more rows in a, after b's batch
        f.write(_rows(10, 30))
    with open(f"{inp}/c.json", "w") as f:
        f.write(_rows(200, 1))
    q = _start(inp, chk, out)
    with pytest.raises(inc.StreamingQueryException) as ei:
        q.await_termination()
    assert isinstance(ei.value.cause, DataLossError)
    msg = str(ei.value)
    assert f"{inp}/a.json changed after the batch of seen-files entry 0 read it (1 batches before the previous " \
           "one) (size 230 -> 950 bytes)" in msg
    assert "plan step" in msg and "fail_on_data_loss=False" in msg
    assert _ids(out) == list(range(10)) + [100]
    # accepting the loss: warned once, counted in the next batch's metrics
    with caplog.at_level(logging.WARNING, logger="increments.sources.files"):
        q = _run(inp, chk, out, fail_on_data_loss=False)
    assert q.exception() is None and _ids(out) == list(range(10)) + [100, 200]
    warned = [r for r in caplog.records if r.name == "increments.sources.files" and "a.json changed" in r.getMessage()]
    assert len(warned) == 1
    assert q.last_progress["sources"][0]["changed_files"] == [f"{inp}/a.json"]


def test_the_only_file_growing_fails_the_idle_plan(d):
    """No later file, so no batch: the plan of the idle processing-time trigger finds it."""
    inp, chk, out = d
    with open(f"{inp}/a.json", "w") as f:
        f.write(_rows(0, 10))
    q = _start(inp, chk, out, trigger={"processing_time": "100 milliseconds"})
    q.process_all_available()
    with open(f"{inp}/a.json", "a") as f:
        f.write(_rows(10, 5))
    with pytest.raises(inc.StreamingQueryException) as ei:
        q.await_termination(timeout=120)
    assert f"{inp}/a.json changed after the previous batch read it" in str(ei.value)
    assert "plan step" in str(ei.value)
    assert _ids(out) == list(range(10))


def test_an_object_overwritten_two_batches_later_fails_on_s3(s3_bucket, tmp_path, pg_url):
    inp = storage.location(f"{s3_bucket}/win")
    out = str(tmp_path / "out")

    def run(**kw):
        q = (inc.read_stream.files(f"{s3_bucket}/win", "json", "id BIGINT, name STRING", max_files_per_trigger=1, **kw)
             .write_stream.format("delta").checkpoint_location(f"{s3_bucket}/chk-win").option("log_url", pg_url)
             .query_name("window_s3").trigger(available_now=True).start(out))
        q.await_termination()
        return q
    inp.write_bytes("a.json", _rows(0, 10).encode())
    run()
    inp.write_bytes("b.json", _rows(100, 1).encode())
    run()
    inp.write_bytes("a.json", _rows(0, 10).replace('"r"', '"R"').encode())     # same size, new etag
    inp.write_bytes("c.json", _rows(200, 1).encode())
    with pytest.raises(inc.StreamingQueryException) as ei:
        run()
    assert f"{s3_bucket}/win/a.json changed after the batch of seen-files entry 0 read it" in str(ei.value)
    assert "rewritten in place: same size, new etag" in str(ei.value)
    assert _ids(out) == list(range(10)) + [100]


def test_a_fresh_process_uses_the_window_index_and_the_window_bounds_the_check(d):
    """40 batches: the index written at entry 32 plus entries 33..39 make the window of a new
    start; a change to file 2 is found. With changed_files_window=5 it is outside the window."""
    inp, chk, out = d
    for k in range(40):
        with open(f"{inp}/f{k:03d}.json", "w") as f:
            f.write(_rows(k * 10, 2))
    _run(inp, chk, out)
    assert os.path.exists(os.path.join(chk, "sources", "0", "window", "32.json"))
    with open(f"{inp}/f002.json", "a") as f:
        f.write(_rows(999, 1))
    with open(f"{inp}/f040.json", "w") as f:
        f.write(_rows(400, 1))
    q = _start(inp, chk, out, changed_files_window=5)
    q.await_termination()
    assert q.exception() is None and 400 in _ids(out)      # f002 is older than the last 5 files read
    with open(f"{inp}/f041.json", "w") as f:
        f.write(_rows(410, 1))
    q = _start(inp, chk, out)
    with pytest.raises(inc.StreamingQueryException, match=r"f002\.json changed after the batch of seen-files entry 2 read it"):
        q.await_termination()

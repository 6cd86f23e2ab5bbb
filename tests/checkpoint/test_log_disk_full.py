"""Issue 28 item 9: a full disk under the embedded SQLite log (a real 2 MiB tmpfs filled up) fails
the batch naming the log file, ENOSPC and the free space, instead of "disk I/O error [SQL:
PRAGMA ...]"; once space is freed the query goes on and each row lands once."""
from __future__ import annotations

import errno
import json
import os
import subprocess

import pytest

import increments as inc
from increments.sinks.parquet import read_parquet_sink


@pytest.fixture
def small_disk(tmp_path):
    d = tmp_path / "disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield str(d)
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _fill(d: str) -> str:
    filler = os.path.join(d, "filler")
    f = open(filler, "wb")
    try:
        while True:
            f.write(b"x" * 4096)
            f.flush()
    except OSError as e:
        assert e.errno == errno.ENOSPC
    try:
        f.close()
    except OSError:
        pass
    return filler


def _forget_engines() -> None:
    from increments.checkpoint.log import _ENGINES
    for url in [u for u in _ENGINES if u.startswith("sqlite")]:
        _ENGINES.pop(url).dispose()


def _start(inp, chk, out, log):
    return (inc.read_stream.files(inp, "json", "id BIGINT").write_stream.format("parquet")
            .checkpoint_location(chk).option("log_url", "sqlite:///" + log).query_name("full")
            .trigger(available_now=True).start(out))


def test_a_full_disk_under_the_sqlite_log_names_the_file_and_enospc(small_disk, tmp_path):
    inp, chk, out = str(tmp_path / "in"), str(tmp_path / "chk"), str(tmp_path / "out")
    log = os.path.join(small_disk, "log.sqlite")
    os.makedirs(inp)
    with open(os.path.join(inp, "a.json"), "w") as f:
        f.write(json.dumps({"id": 1}) + "\n")
    q = _start(inp, chk, out, log)
    q.await_termination()
    filler = _fill(small_disk)
    with open(os.path.join(inp, "b.json"), "w") as f:
        f.write("".join(json.dumps({"id": i}) + "\n" for i in range(2, 2000)))
    _forget_engines()                          # a new process's start
    msg = ""
    try:
        q = _start(inp, chk, out, log)
        q.await_termination()
    except (inc.StreamingQueryException, inc.errors.CheckpointAccessError) as e:
        msg = str(e)
    assert f"the offsets/commits log {log} cannot be written: the disk is full (ENOSPC" in msg, msg
    assert "bytes free on the filesystem of" in msg and "[SQL:" not in msg
    os.remove(filler)                          # space again: the query goes on, each row once
    _forget_engines()
    q = _start(inp, chk, out, log)
    q.await_termination()
    assert q.exception() is None
    assert sorted(read_parquet_sink(out).column("id").to_pylist()) == list(range(1, 2000))


def test_a_full_disk_under_the_checkpoint_says_so(small_disk, tmp_path):
    inp = str(tmp_path / "in")
    os.makedirs(inp)
    _fill(small_disk)
    with pytest.raises(inc.errors.CheckpointAccessError) as ei:
        (inc.read_stream.files(inp, "json", "id BIGINT").write_stream.format("parquet")
         .checkpoint_location(os.path.join(small_disk, "chk")).trigger(available_now=True)
         .start(str(tmp_path / "out")))
    assert "the disk is full (ENOSPC" in str(ei.value) and os.path.join(small_disk, "chk") in str(ei.value)

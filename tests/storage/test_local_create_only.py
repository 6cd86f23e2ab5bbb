"""Create-only writes on the local disk: exactly one of racing writers wins, the name appears only with
the whole content, and nothing else is left in the directory, through the unnamed temp file
(O_TMPFILE, Linux) and through the named ``.tmp-`` file it falls back to."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from increments import storage
from increments.storage import local


@pytest.fixture(params=["unnamed", "named"])
def mode(request, monkeypatch):
    if request.param == "unnamed" and not local._tmpfile_ok:
        pytest.skip("no O_TMPFILE on this file system")
    if request.param == "named":
        monkeypatch.setattr(local, "_tmpfile_ok", False)
    return request.param


def test_racing_create_only_writers_one_wins_whole_and_nothing_left(tmp_path, mode):
    loc = storage.location(str(tmp_path / "root"))
    datas = [bytes([i]) * (200_000 + i) for i in range(8)]
    won, lost = [], []
    go = threading.Barrier(len(datas))

    def write(i):
        go.wait()
        try:
            loc.write_bytes("d/7.abc.changelog", datas[i], create_only=True)
            won.append(i)
        except FileExistsError as e:
            assert "7.abc.changelog" in str(e)
            lost.append(i)
    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(datas))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == len(datas) - 1
    assert local._tmpfile_ok == (mode == "unnamed")      # the unnamed path did not fall back
    assert loc.read_bytes("d/7.abc.changelog") == datas[won[0]]
    assert os.listdir(tmp_path / "root" / "d") == ["7.abc.changelog"]
    assert oct(os.stat(tmp_path / "root" / "d" / "7.abc.changelog").st_mode & 0o777) == oct(0o600)


def test_a_crash_before_the_link_leaves_no_name_and_no_temp_file(tmp_path, mode):
    """The writer's process dies right after its data is fsynced, before the name is linked."""
    root = tmp_path / "root"
    code = f"""
import os
from increments import storage
from increments.storage import local
local._tmpfile_ok = {mode == "unnamed"}
real = os.fsync
def die(fd):
    real(fd)
    os._exit(9)
os.fsync = die
storage.location({str(root)!r}).write_bytes("d/1.x.changelog", b"x" * 5000, create_only=True)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert r.returncode == 9, r.stderr.decode()
    names = os.listdir(root / "d")
    assert "1.x.changelog" not in names
    # the unnamed file vanishes with its process; the named one stays as a .tmp- file, never listed
    assert names == ([] if mode == "unnamed" else names) and all(n.startswith(".tmp-") for n in names)
    assert storage.location(str(root)).list("d") == []


def test_a_write_that_leaves_the_directory_fsync_to_the_next_one(tmp_path, mode, monkeypatch):
    """``sync_dir=False`` (a snapshot's data file before its ``_meta.json``, state.files.put ``more``):
    the same create-only write, content fsynced before the name appears, but no directory fsync;
    the next durable write into the directory makes both names durable with its one fsync."""
    synced = []
    real = local._fsync_dir
    monkeypatch.setattr(local, "_fsync_dir", lambda d: (synced.append(d), real(d)))
    loc = storage.location(str(tmp_path / "root"))
    loc.write_bytes("5.t.snapshot/rows.arrow", b"r" * 3000, create_only=True, sync_dir=False)
    assert synced == []
    with pytest.raises(FileExistsError, match="rows.arrow"):
        loc.write_bytes("5.t.snapshot/rows.arrow", b"other", create_only=True, sync_dir=False)
    loc.write_bytes("5.t.snapshot/_meta.json", b"{}", create_only=True)
    assert synced == [str(tmp_path / "root" / "5.t.snapshot")]
    assert loc.read_bytes("5.t.snapshot/rows.arrow") == b"r" * 3000
    assert sorted(os.listdir(tmp_path / "root" / "5.t.snapshot")) == ["_meta.json", "rows.arrow"]

"""read_stream.files on a path that does not exist fails at start, naming it (as Spark's file
source does), on the local disk and on S3; wait_for_path=True starts anyway and reads the files
once they land."""
from __future__ import annotations

import json

import pytest

import increments as inc
from increments import storage


def _start(path: str, name: str, chk: str, **kw):
    return (inc.read_stream.files(path, "json", "id BIGINT", **kw).write_stream.format("memory")
            .query_name(name).checkpoint_location(chk).trigger(available_now=True).start())


def test_a_missing_directory_fails_the_start_naming_it(tmp_path):
    missing = str(tmp_path / "landing" / "clicks")
    with pytest.raises(FileNotFoundError) as e:
        _start(missing, "missing_dir", str(tmp_path / "chk"))
    assert missing in str(e.value) and "wait_for_path=True" in str(e.value)


def test_a_missing_prefix_on_s3_fails_the_start(s3_bucket, tmp_path):
    with pytest.raises(FileNotFoundError, match="landing/none"):
        _start(f"{s3_bucket}/landing/none", "missing_prefix", str(tmp_path / "chk"))


def test_wait_for_path_starts_and_reads_the_files_once_they_land(tmp_path):
    d = tmp_path / "later"
    q = _start(str(d), "waits", str(tmp_path / "chk"), wait_for_path=True)
    q.await_termination()
    assert q.exception() is None and inc.memory_table("waits").num_rows == 0
    d.mkdir()
    (d / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(3)))
    q = _start(str(d), "waits", str(tmp_path / "chk"), wait_for_path=True)
    q.await_termination()
    assert sorted(r["id"] for r in inc.memory_table("waits").to_pylist()) == [0, 1, 2]


def test_a_prefix_holding_objects_is_a_path_that_exists(s3_bucket, tmp_path):
    storage.location(f"{s3_bucket}/in").write_bytes("only.json", b'{"id": 7}\n')
    q = _start(f"{s3_bucket}/in", "one_object", str(tmp_path / "chk"))
    q.await_termination()
    assert q.exception() is None


# -- issue 28 item 9: a single file, a directory whose files are all in sub-directories ----------------------
def test_a_single_file_path_is_read(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(3)))
    (d / "b.json").write_text(json.dumps({"id": 9}) + "\n")          # beside it: not this source's
    q = _start(str(d / "a.json"), "one_file", str(tmp_path / "chk"))
    q.await_termination()
    assert q.exception() is None
    assert sorted(r["id"] for r in inc.memory_table("one_file").to_pylist()) == [0, 1, 2]


def test_a_single_object_on_s3_is_read(s3_bucket, tmp_path):
    loc = storage.location(f"{s3_bucket}/one")
    loc.write_bytes("a.json", b'{"id": 1}\n{"id": 2}\n')
    loc.write_bytes("ab.json", b'{"id": 7}\n')
    q = _start(f"{s3_bucket}/one/a.json", "one_object", str(tmp_path / "chk"))
    q.await_termination()
    assert q.exception() is None
    assert sorted(r["id"] for r in inc.memory_table("one_object").to_pylist()) == [1, 2]


def test_a_directory_with_files_only_in_subdirectories_warns_naming_a_glob(tmp_path, caplog):
    d = tmp_path / "in"
    (d / "2026-01-01").mkdir(parents=True)
    (d / "2026-01-01" / "a.json").write_text(json.dumps({"id": 1}) + "\n")
    with caplog.at_level("WARNING", logger="increments.sources.files"):
        q = _start(str(d), "nested", str(tmp_path / "chk"))
        q.await_termination()
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert f"the directory {d} holds no file of its own" in msg and "2026-01-01/a.json" in msg
    assert f"read_stream.files('{d}/*/*'" in msg
    q = _start(f"{d}/*/*", "nested_glob", str(tmp_path / "chk2"))     # the advice works
    q.await_termination()
    assert [r["id"] for r in inc.memory_table("nested_glob").to_pylist()] == [1]

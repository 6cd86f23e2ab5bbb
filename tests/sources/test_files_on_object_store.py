"""The file source on a Location: S3 (moto's server on loopback) and the local disk.

* json / csv / parquet objects on S3 are read batch by batch (max_files_per_trigger), with and
  without read-ahead; seen-files entries record size, mtime, etag and the last key.
* Listing asks the store only for the keys after the last one read (name order): with 2000+
  objects already read, the next plan's listing returns only the new keys.
* A plan that finds entry n already written (a zombie's or a crashed plan's) adopts it and never
  overwrites it.
* AvailableNow target = the last key at drain start; backlog counts files after the last key;
  '.'/'_' names and sub-directories are skipped; globs match per path segment.
* A malformed object is named by its URL; a vanished one is data loss; fetched copies are deleted.
"""
from __future__ import annotations

import io
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from increments import storage
from increments.errors import DataLossError, MalformedInputError
from increments.sources.files import FileSource
from increments.storage.remote import RemoteLocation

SCHEMA = "id BIGINT, name STRING"


def _json(ids) -> bytes:
    return "".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids).encode()


def _csv(ids) -> bytes:
    return "".join(f"{i},n{i}\n" for i in ids).encode()


def _parquet(ids) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(list(ids), pa.int64()), "name": [f"n{i}" for i in ids]}), buf)
    return buf.getvalue()


ENCODE = {"json": _json, "csv": _csv, "parquet": _parquet}


def _source(url, chk_url, fmt="json", **kw):
    src = FileSource(url, fmt, SCHEMA, **kw)
    src.open(storage.location(chk_url), 0, "q")
    return src


def _ids(t: pa.Table) -> list[int]:
    return t.column("id").to_pylist()


@pytest.fixture
def fetch_dir(tmp_path, monkeypatch):
    d = tmp_path / "local"
    monkeypatch.setenv("INCREMENTS_LOCAL_DIR", str(d))
    return d / "fetch"


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet"])
@pytest.mark.parametrize("read_ahead", [False, True])
def test_formats_on_s3_batch_by_batch(s3_bucket, fetch_dir, fmt, read_ahead):
    inp = storage.location(f"{s3_bucket}/in")
    for k in range(3):
        inp.write_bytes(f"f{k}.{fmt}", ENCODE[fmt](range(k * 10, k * 10 + 3)))
    src = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", fmt, max_files_per_trigger=2)
    if read_ahead:
        src.enable_read_ahead()
    try:
        assert src.latest_offset(-1) == 0
        assert _ids(src.read(-1, 0)) == [0, 1, 2, 10, 11, 12]
        assert src.latest_offset(0) == 1
        assert _ids(src.read(0, 1)) == [20, 21, 22]
        assert src.latest_offset(1) == 1                       # nothing new
        assert _ids(src.read(-1, 1)) == [0, 1, 2, 10, 11, 12, 20, 21, 22]   # a replay reads the same rows
    finally:
        src.close()
    entry = storage.location(f"{s3_bucket}/chk").read_json("sources/0/0.json")
    assert entry["last"] == f"f1.{fmt}"
    assert [f["name"] for f in entry["files"]] == [f"f0.{fmt}", f"f1.{fmt}"]
    assert all(f["size"] > 0 and f["mtime_ms"] > 0 and f["etag"] for f in entry["files"])
    assert os.listdir(fetch_dir) == []                          # fetched copies are deleted


@pytest.fixture
def list_calls(monkeypatch):
    """Every listing of an object-store location: (start_after, names returned)."""
    calls = []
    real = RemoteLocation.list

    def spy(self, prefix="", *, start_after=None, limit=None):
        out = real(self, prefix, start_after=start_after, limit=limit)
        calls.append((start_after, [o.name for o in out]))
        return out
    monkeypatch.setattr(RemoteLocation, "list", spy)
    return calls


def test_listing_asks_only_for_keys_after_the_last_one_read(s3_bucket, fetch_dir, list_calls):
    inp = storage.location(f"{s3_bucket}/in")
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: inp.write_bytes(f"f{k:05d}.json", _json([k])), range(2100)))
    src = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", changed_files_window=0)
    assert src.latest_offset(-1) == 0
    assert len(src.files_for(-1, 0)) == 2100
    assert _ids(src.read(-1, 0)) == list(range(2100))            # many objects: one scan, in name order
    inp.write_bytes("f99998.json", _json([99998]))
    inp.write_bytes("f99999.json", _json([99999]))
    list_calls.clear()
    assert src.latest_offset(0) == 1
    assert list_calls == [("f02099.json", ["f99998.json", "f99999.json"])]
    assert _ids(src.read(0, 1)) == [99998, 99999]
    list_calls.clear()
    assert src.latest_offset(1) == 1
    assert list_calls == [("f99999.json", [])]
    assert src.backlog(0) == {"files_pending": 2} and src.backlog(1) == {"files_pending": 0}
    # with the check of the files read (the default window): two listings a plan whatever the
    # window: from the last 1,000 files read on (new files included: the plan's listing too), and
    # one page of 1,000 at the slice of older files that moves on at each plan (a fresh process
    # starts it at entry x 1,000, here 1,000 of the 1,102 older files, as if it had planned each batch)
    win = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk")
    list_calls.clear()
    assert win.latest_offset(1) == 1
    assert [(c[1][0], c[1][-1], len(c[1])) for c in list_calls] == [
        ("f01102.json", "f99999.json", 1000), ("f01000.json", "f01101.json", 102)]
    list_calls.clear()
    assert win.latest_offset(1) == 1
    assert [(c[1][0], len(c[1])) for c in list_calls] == [("f01102.json", 1000), ("f00000.json", 1000)]


def test_many_local_files_list_only_the_new_ones(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    for k in range(20_000):
        (d / f"f{k:06d}.json").write_bytes(_json([k]))
    src = _source(str(d), str(tmp_path / "chk"), max_files_per_trigger=5000)
    for n in range(4):
        assert src.latest_offset(n - 1) == n
    assert src.latest_offset(3) == 3
    (d / "f999999.json").write_bytes(_json([7]))
    assert src.latest_offset(3) == 4 and src.files_for(3, 4) == ["f999999.json"]
    assert _ids(src.read(3, 4)) == [7]
    assert _ids(src.read(0, 1)) == list(range(5000, 10000))      # one multi-file scan, in name order
    (d / "f010001.json").write_bytes(_json([1]) + b"{oops\n")      # a bad file among many is still named
    with pytest.raises(MalformedInputError, match=r"f010001\.json, line 2"):
        src.read(1, 2)


def test_a_plan_that_finds_entry_n_adopts_it(s3_bucket, fetch_dir):
    inp = storage.location(f"{s3_bucket}/in")
    for k in range(3):
        inp.write_bytes(f"f{k}.json", _json([k]))
    winner = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", max_files_per_trigger=1)
    assert winner.latest_offset(-1) == 0
    written = storage.location(f"{s3_bucket}/chk").read_bytes("sources/0/0.json")
    # a zombie (or a restart after a plan that crashed before offsets[0]) plans batch 0 with another limit
    zombie = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", max_files_per_trigger=3)
    assert zombie.latest_offset(-1) == 0
    assert zombie.files_for(-1, 0) == ["f0.json"]                 # adopted, not its own three files
    assert storage.location(f"{s3_bucket}/chk").read_bytes("sources/0/0.json") == written
    assert _ids(zombie.read(-1, 0)) == _ids(winner.read(-1, 0)) == [0]
    assert zombie.latest_offset(0) == 1 and zombie.files_for(0, 1) == ["f1.json", "f2.json"]


def test_an_adopted_entry_shorter_than_the_plan_loses_no_file(s3_bucket, fetch_dir):
    """The plan listed f0..f4 and wanted f0, f1; entry 0 (another runner's) holds only f0: the next
    plan, served from this listing, starts at f1."""
    inp = storage.location(f"{s3_bucket}/in")
    for k in range(5):
        inp.write_bytes(f"f{k}.json", _json([k]))
    _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", max_files_per_trigger=1).latest_offset(-1)
    src = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", max_files_per_trigger=2)
    assert src.latest_offset(-1) == 0 and src.files_for(-1, 0) == ["f0.json"]
    assert src.latest_offset(0) == 1 and src.files_for(0, 1) == ["f1.json", "f2.json"]
    assert src.latest_offset(1) == 2 and src.files_for(1, 2) == ["f3.json", "f4.json"]


def test_available_now_target_is_the_last_key_at_drain_start(s3_bucket, fetch_dir):
    inp = storage.location(f"{s3_bucket}/in")
    for k in range(3):
        inp.write_bytes(f"f{k}.json", _json([k]))
    src = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", max_files_per_trigger=2)
    assert src.latest_offset(-1) == 0
    src.prepare_available_now()
    assert src.available_now_target() == "f2.json"
    inp.write_bytes("f3.json", _json([3]))
    assert src.latest_offset(0) == 1 and src.files_for(0, 1) == ["f2.json"]
    assert src.latest_offset(1) == 1                               # f3 came after the drain started
    src.set_available_now_target(None)
    assert src.latest_offset(1) == 2


def test_old_list_form_of_the_target(tmp_path):
    """A drain started before this version stored the paths available at its start: read as the last."""
    d = tmp_path / "in"
    d.mkdir()
    for k in range(4):
        (d / f"f{k}.json").write_bytes(_json([k]))
    src = _source(str(d), str(tmp_path / "chk"))
    src.set_available_now_target([str(d / "f1.json"), str(d / "f0.json")])
    assert src.latest_offset(-1) == 0 and src.files_for(-1, 0) == ["f0.json", "f1.json"]


def test_hidden_names_subdirectories_and_globs(s3_bucket, fetch_dir):
    inp = storage.location(f"{s3_bucket}/in")
    for name in ["a.json", ".tmp.json", "_SUCCESS", "sub/b.json", "2024-01/c.json", "2024-02/d.json",
                 "2024-02/_e.json", "2025-01/f.json", "2024-03/deeper/g.json"]:
        inp.write_bytes(name, _json([len(name)]))
    plain = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk1")
    assert plain.latest_offset(-1) == 0 and plain.files_for(-1, 0) == ["a.json"]
    glob = _source(f"{s3_bucket}/in/2024-*/*.json", f"{s3_bucket}/chk2")
    assert glob.latest_offset(-1) == 0 and glob.files_for(-1, 0) == ["2024-01/c.json", "2024-02/d.json"]


def test_malformed_object_is_named_by_its_url_and_a_vanished_one_is_data_loss(s3_bucket, fetch_dir):
    inp = storage.location(f"{s3_bucket}/in")
    inp.write_bytes("a.json", _json([1]) + b'{"id": \n')
    inp.write_bytes("b.json", _json([2]))
    src = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", max_files_per_trigger=1)
    assert src.latest_offset(-1) == 0
    with pytest.raises(MalformedInputError, match=rf"file {s3_bucket}/in/a\.json, line 2"):
        src.read(-1, 0)
    assert src.latest_offset(0) == 1
    inp.delete("b.json")
    with pytest.raises(DataLossError, match=rf"file {s3_bucket}/in/b\.json was listed for this batch but is gone"):
        src.read(0, 1)
    lenient = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", max_files_per_trigger=1, fail_on_data_loss=False)
    assert lenient.read(0, 1).num_rows == 0
    assert lenient.read_metrics["skipped_files"] == [f"{s3_bucket}/in/b.json"]
    assert os.listdir(fetch_dir) == []


def test_parquet_schema_is_inferred_from_an_object(s3_bucket, fetch_dir):
    storage.location(f"{s3_bucket}/in").write_bytes("p.parquet", _parquet([1, 2]))
    src = FileSource(f"{s3_bucket}/in", "parquet")
    assert src.schema().names == ["id", "name"]


def test_unknown_scheme_is_refused_when_the_source_is_made():
    with pytest.raises(storage.UnknownSchemeError, match="ftp://"):
        FileSource("ftp://host/in", "json", SCHEMA)
    from increments.sources.delta import DeltaSource
    with pytest.raises(storage.UnknownSchemeError, match="hdfs://"):
        DeltaSource("hdfs://nn/table")


def test_source_storage_options_win_over_the_query_ones(s3_bucket, fetch_dir):
    storage.location(f"{s3_bucket}/in").write_bytes("a.json", _json([1]))
    src = FileSource(f"{s3_bucket}/in", "json", SCHEMA, storage_options={"aws_region": "us-east-1"})
    src.open(storage.location(f"{s3_bucket}/chk"), 0, "q", {"aws_region": "eu-west-3", "allow_http": "true"})
    assert src.options() == {"aws_region": "us-east-1", "allow_http": "true"}
    assert src.latest_offset(-1) == 0 and _ids(src.read(-1, 0)) == [1]


def test_file_urls_and_a_glob_on_the_local_disk(tmp_path):
    d = tmp_path / "in"
    (d / "2024-01").mkdir(parents=True)
    (d / "a.json").write_bytes(_json([1]))
    (d / "2024-01" / "b.json").write_bytes(_json([2]))
    url = f"file://{d}"
    plain = _source(url, f"file://{tmp_path}/chk1")
    assert plain.latest_offset(-1) == 0 and _ids(plain.read(-1, 0)) == [1]
    glob = _source(f"{url}/2024-*/*.json", str(tmp_path / "chk2"))
    assert glob.latest_offset(-1) == 0 and _ids(glob.read(-1, 0)) == [2]
    assert os.path.exists(tmp_path / "chk1" / "sources" / "0" / "0.json")


def test_a_checkpoint_with_version_1_entries_continues_after_their_last_file(tmp_path):
    """Entries written before this version list absolute paths and no last name: they are read as
    they are, and the next entry starts after their last file (as named then: by base name)."""
    d = tmp_path / "in"
    d.mkdir()
    for k in range(4):
        (d / f"f{k}.json").write_bytes(_json([k]))
    chk = tmp_path / "chk" / "sources" / "0"
    chk.mkdir(parents=True)
    (chk / "0.json").write_text(json.dumps({"version": 1, "files": [str(d / "f0.json"), str(d / "f1.json")]}))
    (chk / "1.json").write_text(json.dumps({"version": 1, "files": [str(d / "f2.json")]}))   # an orphan plan
    src = _source(str(d), str(tmp_path / "chk"))
    assert _ids(src.read(-1, 0)) == [0, 1]
    assert src.latest_offset(0) == 1 and src.files_for(0, 1) == [str(d / "f2.json")]   # adopted
    assert _ids(src.read(0, 1)) == [2]
    assert src.latest_offset(1) == 2 and src.files_for(1, 2) == ["f3.json"]


def test_read_ahead_of_objects_is_used_and_dropped_when_the_object_changed(s3_bucket, fetch_dir):
    """An object's read-ahead result is used only if the object read had the size and etag its
    seen-files entry recorded (taking it costs no request)."""
    inp = storage.location(f"{s3_bucket}/in")
    for k in range(3):
        inp.write_bytes(f"f{k}.json", _json([k]))
    src = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", max_files_per_trigger=1)
    src.enable_read_ahead()
    # the next plan lists again and writes its own entry (no entry written ahead: with one, entry 1
    # records f1 as the first listing saw it, and the rows decoded ahead at that etag are used)
    src._write_entry_ahead = lambda n, files: None
    taken = []
    real_take = src._read_ahead.take

    def take(path, columns):
        out = real_take(path, columns)
        taken.append((path, out is not None))
        return out
    src._read_ahead.take = take
    try:
        assert src.latest_offset(-1) == 0                   # queues f0 (this batch) and f1, f2 (next ones)
        assert _ids(src.read(-1, 0)) == [0]
        time.sleep(0.5)                                     # (f1's read-ahead is done)
        inp.write_bytes("f1.json", _json([7]))              # replaced after its read-ahead
        src._listed = None                                  # the next plan lists again (no reused listing)
        assert src.latest_offset(0) == 1                    # entry 1 records f1's new etag
        assert _ids(src.read(0, 1)) == [7]
        assert src.latest_offset(1) == 2 and _ids(src.read(1, 2)) == [2]
    finally:
        src.close()
    assert taken == [("f0.json", True), ("f1.json", False), ("f2.json", True)]


def test_the_newest_seen_files_entry_is_found_on_s3(s3_bucket, fetch_dir):
    inp = storage.location(f"{s3_bucket}/in")
    for k in range(12):
        inp.write_bytes(f"f{k:02d}.json", _json([k]))
    src = _source(f"{s3_bucket}/in", f"{s3_bucket}/chk", max_files_per_trigger=1)
    for n in range(11):
        assert src.latest_offset(n - 1) == n
    assert src._log.newest() == 10                      # numerically, not by name ("9" > "10")


@pytest.mark.parametrize("files", [1, 9])       # one fetched object; many copied into one scan
def test_fetched_objects_go_under_the_local_dir_option(s3_bucket, tmp_path, monkeypatch, pg_url, files):
    """Issue 28 item 9: the query's local_dir option is where objects are fetched to: with the
    default root unusable (INCREMENTS_LOCAL_DIR under a regular file), the query still reads."""
    import increments as inc
    (tmp_path / "not-a-dir").write_text("")
    monkeypatch.setenv("INCREMENTS_LOCAL_DIR", str(tmp_path / "not-a-dir" / "cache"))
    inp = storage.location(f"{s3_bucket}/ld{files}")
    for k in range(files):
        inp.write_bytes(f"f{k}.json", _json([k]))
    local = tmp_path / "mine"
    q = (inc.read_stream.files(f"{s3_bucket}/ld{files}", "json", SCHEMA).write_stream.format("memory")
         .query_name(f"local_dir_{files}").checkpoint_location(f"{s3_bucket}/chk-ld{files}")
         .option("log_url", pg_url).option("local_dir", str(local)).option("state_store", "memory")
         .trigger(available_now=True).start())
    q.await_termination()
    assert q.exception() is None
    assert sorted(r["id"] for r in inc.memory_table(f"local_dir_{files}").to_pylist()) == list(range(files))
    assert (local / "fetch").is_dir() and list((local / "fetch").iterdir()) == []   # copies removed after reading

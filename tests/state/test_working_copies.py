"""RocksDB working copies are caches: rebuilt when missing, stale or tampered with, kept private,
found on a fresh machine from the object store, and never a reason for a second runner to die."""
import os
import subprocess
import sys
import tempfile

import pytest

from crash_commit import apply_batch, model_batch
from state_testutil import ROOT, STORAGES, checkpoint_url
from state import StateStoreError, make_provider
from state.encoding import encode_key
from state.working import Working
from test_state_store import build, content

K = encode_key


def _machine(monkeypatch, tmp_path, name: str) -> str:
    """Make this process look like another machine: its own TMPDIR, no INCREMENTS_LOCAL_DIR."""
    tmp = tmp_path / name
    tmp.mkdir(mode=0o700, exist_ok=True)
    monkeypatch.delenv("INCREMENTS_LOCAL_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)       # gettempdir() caches its answer
    return str(tmp)


@pytest.mark.parametrize("name", ["memory", "rocksdb"])
def test_another_machine_loads_the_same_state_from_s3(s3_bucket, tmp_path, monkeypatch, name):
    ckpt = s3_bucket + "/chk"
    m1 = _machine(monkeypatch, tmp_path, "m1")
    with make_provider(name, ckpt, snapshot_interval=3) as p:
        models = build(p, 7)
        t7 = p.open("op", 0, 7).token
    if name == "rocksdb":
        assert os.listdir(os.path.join(m1, f"increments-{os.getuid()}", "state"))
    _machine(monkeypatch, tmp_path, "m2")
    with make_provider(name, ckpt, snapshot_interval=3) as p:
        s = p.open("op", 0, 7, t7)
        assert content(s) == models[7]
        apply_batch(s, 8)
        s.commit(8)
        t8 = s.token
    model8 = dict(models[7]); model_batch(model8, 8)
    _machine(monkeypatch, tmp_path, "m1")                   # back on the first machine: its copy is stale
    with make_provider(name, ckpt, snapshot_interval=3) as p:
        assert content(p.open("op", 0, 8, t8)) == model8


def _built(request, tmp_path, storage, **conf):
    ckpt = checkpoint_url(request, tmp_path, storage)
    conf = {"local_dir": str(tmp_path / "w"), "snapshot_interval": 3, **conf}
    with make_provider("rocksdb", ckpt, **conf) as p:
        models = build(p, 4)
        s = p.open("op", 0, 4)
        path, token, lineage = s._w.path, s.token, dict(s._w.lineage)
    return ckpt, conf, models, path, token, lineage


@pytest.mark.parametrize("storage", STORAGES)
def test_a_tampered_working_copy_is_rebuilt(request, tmp_path, storage):
    ckpt, conf, models, path, token, lineage = _built(request, tmp_path, storage)
    rows = len(models[4])
    tampers = [
        ("a token the checkpoint never wrote", lambda w: w.write([K(("evil",))], [b"x"], 4, "f" * 32, rows + 1, {})),
        ("the right token, other rows", lambda w: w.write([K(("evil",))], [b"x"], 4, token, rows + 1, lineage)),
        ("the right token and rows, another version", lambda w: w.write([], [], 3, token, rows, lineage)),
    ]
    for what, tamper in tampers:
        w = Working(path)
        tamper(w)
        w.close()
        with make_provider("rocksdb", ckpt, **conf) as p:
            s = p.open("op", 0, 4, token)
            assert content(s) == models[4], what
            assert (s._w.token, s._w.rows) == (token, rows), what


@pytest.mark.parametrize("storage", STORAGES)
def test_a_working_copy_warmed_ahead_is_checked_at_open_like_any_other(request, tmp_path, storage):
    """warm() (the local runner's start) opens the working copy before the first open(), which
    still serves exactly the version asked for: the one the copy holds as it is, another one rebuilt,
    a store never written empty. A warm that fails leaves the error to open()."""
    ckpt, conf, models, path, token, lineage = _built(request, tmp_path, storage)
    with make_provider("rocksdb", ckpt, **conf) as p:
        p.warm("op", 0)
        s = p.open("op", 0, 4, token)
        assert content(s) == models[4] and s._w.path == path
    with make_provider("rocksdb", ckpt, **conf) as p:
        p.warm("op", 0)
        assert content(p.open("op", 0, 2)) == models[2]
        p.warm("op", 1)
        assert content(p.open("op", 1, -1)) == {}
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with make_provider("rocksdb", ckpt, local_dir=str(shared)) as p:
        with pytest.raises(Exception, match="can be written by other users"):
            p.warm("op", 0)
        with pytest.raises(StateStoreError, match="can be written by other users"):
            p.open("op", 0, -1)


ROOT_ONLY = pytest.mark.skipif(os.getuid() != 0, reason="only root can give a directory to another user (chown)")


@ROOT_ONLY
def test_a_cache_root_of_another_user_is_refused(tmp_path):
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    os.chown(other, 12345, 12345)
    with make_provider("rocksdb", str(tmp_path / "ckpt"), local_dir=str(other)) as p:
        with pytest.raises(StateStoreError, match="belongs to user id 12345"):
            p.open("op", 0, -1)


def test_a_cache_root_writable_by_others_is_refused(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with make_provider("rocksdb", ckpt, local_dir=str(shared)) as p:
        with pytest.raises(StateStoreError, match="can be written by other users"):
            p.open("op", 0, -1)


def _store_with_planted_content(tmp_path):
    """(checkpoint, provider conf, models, token, the store's working directory), a planted row in it."""
    ckpt = str(tmp_path / "ckpt")
    conf = {"local_dir": str(tmp_path / "w")}
    with make_provider("rocksdb", ckpt, **conf) as p:
        models = build(p, 2)
        s = p.open("op", 0, 2)
        token, store_dir = s.token, os.path.dirname(s._w.path)
    w = Working(os.path.join(store_dir, "db"))               # planted content, the right meta
    w.write([K(("evil",))], [b"x"], 2, token, len(models[2]), {})
    w.close()
    return ckpt, conf, models, token, store_dir


def test_a_store_directory_writable_by_others_is_rebuilt(tmp_path):
    ckpt, conf, models, token, store_dir = _store_with_planted_content(tmp_path)
    os.chmod(store_dir, 0o777)
    with make_provider("rocksdb", ckpt, **conf) as p:
        assert content(p.open("op", 0, 2, token)) == models[2]
    assert os.stat(store_dir).st_mode & 0o777 == 0o700


@ROOT_ONLY
def test_a_store_directory_of_another_user_is_refused(tmp_path):
    ckpt, conf, models, token, store_dir = _store_with_planted_content(tmp_path)
    os.chown(store_dir, 12345, 12345)
    with make_provider("rocksdb", ckpt, **conf) as p:
        with pytest.raises(StateStoreError, match=r"working directory .* belongs to user id 12345"):
            p.open("op", 0, 2, token)


@pytest.mark.parametrize("changelog", [True, False])
@pytest.mark.parametrize("storage", STORAGES)
def test_two_providers_of_one_checkpoint_open_the_same_partition_at_once(request, tmp_path, storage, changelog):
    ckpt, conf, models, path, token, _ = _built(request, tmp_path, storage, changelog_checkpointing=changelog)
    p1, p2 = make_provider("rocksdb", ckpt, **conf), make_provider("rocksdb", ckpt, **conf)
    try:
        s1, s2 = p1.open("op", 0, 4, token), p2.open("op", 0, 4, token)   # no death on the RocksDB lock
        assert content(s1) == content(s2) == models[4]
        assert s1._w.path != s2._w.path
        apply_batch(s1, 5)
        s2.put(K(("second",)), b"2")
        s1.commit(5)
        s2.commit(5)
        t1, t2 = s1.token, s2.token
    finally:
        p1.close()
        p2.close()
    assert not [n for n in os.listdir(os.path.dirname(path)) if n.startswith("proc-")]   # private copy removed
    model5 = dict(models[4]); model_batch(model5, 5)
    with make_provider("rocksdb", ckpt, **dict(conf, local_dir=str(tmp_path / "fresh"))) as p:
        assert content(p.open("op", 0, 5, t1)) == model5
        assert content(p.open("op", 0, 5, t2)) == {**models[4], K(("second",)): b"2"}


_HOLDER = """
import sys
sys.path.insert(0, {root!r})
from state import make_provider
p = make_provider("rocksdb", {ckpt!r}, local_dir={local!r})
s = p.open("op", 0, 4, {token!r})
print("open", flush=True)
sys.stdin.readline()
s.put(b"holder", b"1")
s.commit(5)
p.close()
print(s.token, flush=True)
"""


@pytest.mark.parametrize("storage", STORAGES)
def test_two_runner_processes_both_get_a_working_copy(request, tmp_path, storage):
    ckpt, conf, models, path, token, _ = _built(request, tmp_path, storage)
    code = _HOLDER.format(root=ROOT, ckpt=ckpt, local=conf["local_dir"], token=token)
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        assert holder.stdout.readline().strip() == "open"
        with make_provider("rocksdb", ckpt, **conf) as p:      # the other runner holds the working copy
            s = p.open("op", 0, 4, token)
            assert content(s) == models[4]
            apply_batch(s, 5)
            s.commit(5)
            mine = s.token
        out, _ = holder.communicate("go\n", timeout=120)
        assert holder.returncode == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    theirs = out.strip()
    model5 = dict(models[4]); model_batch(model5, 5)
    with make_provider("rocksdb", ckpt, **dict(conf, local_dir=str(tmp_path / "fresh"))) as p:
        assert content(p.open("op", 0, 5, mine)) == model5
        assert content(p.open("op", 0, 5, theirs)) == {**models[4], b"holder": b"1"}


def test_the_lineage_survives_a_reopen_and_retention_and_an_earlier_release_s_copy_is_read(tmp_path):
    """The working copy keeps the lineage one key per version: after commits past retention and a
    reopen it holds exactly the provider's lineage; a copy of an earlier release (the map inside
    ``meta``) is reused as is, and its next commit moves the map to keys."""
    import json

    from rocksdict import WriteBatch
    ckpt, local = str(tmp_path / "ckpt"), str(tmp_path / "w")
    conf = {"local_dir": local, "snapshot_interval": 2, "retention_versions": 3}
    with make_provider("rocksdb", ckpt, **conf) as p:
        models = build(p, 12)
        s = p.open("op", 0, 12)
        expected, path, token = dict(p._lineages[("op", 0)]), s._w.path, s.token
    assert min(expected) >= 12 - 3 - 2 * 2 and expected[12] == token
    w = Working(path)
    assert (w.version, w.token, w.lineage) == (12, token, expected)
    # rewrite it as an earlier release did: the lineage inside meta, no lineage keys
    wb = WriteBatch(raw_mode=True)
    for v in expected:
        wb.delete(b"lineage:" + v.to_bytes(8, "big"), w.meta_cf)
    wb.put(b"meta", json.dumps({"version": 12, "token": token, "rows": w.rows,
                                "lineage": {str(v): t for v, t in expected.items()}}).encode(), w.meta_cf)
    w.db.write(wb)
    w.close()
    w = Working(path)
    assert w.lineage == expected and not w._keyed
    w.close()
    with make_provider("rocksdb", ckpt, **conf) as p:
        s = p.open("op", 0, 12, token)
        assert s._w.path == path and content(s) == models[12]     # reused, not rebuilt
        apply_batch(s, 13)
        s.commit(13)
        after = dict(p._lineages[("op", 0)])
    w = Working(path)
    assert w._keyed and w.version == 13 and w.lineage == after and after[12] == token
    w.close()


def test_reopened_working_copies_share_one_bounded_block_cache(tmp_path):
    """Each Dagster run reopens the working copies: their freshly flushed files are read into the
    one block cache of the process, which must stay within its capacity however many copies and
    reopens there are (issue 28 item 10: the fanned-out Dagster soak's RSS grew by that cache
    filling up, then stayed flat). Run with the capacity lowered to 1 MB so that a few MB of reads
    overflow it."""
    from state import working
    cache, wbm = working._shared_memory()
    cache.set_capacity(1 << 20)
    try:
        value = b"v" * 200
        for rnd in range(4):                      # four "runs"
            for p in range(3):                    # three partitions' copies, each reopened every run
                path = str(tmp_path / f"p{p}" / "db")
                w = Working(path)
                keys = [K([f"k{rnd}-{i}"]) for i in range(2000)]
                w.write(keys, [value] * len(keys), rnd, f"t{rnd}", len(keys) * (rnd + 1), {rnd: f"t{rnd}"})
                w.close()
                w = Working(path)                 # reopened: the memtable was flushed to a file
                got = w.items(10**7, 10**10)
                assert got is not None and len(got[0]) == 2000 * (rnd + 1)
                w.close()
                assert cache.get_usage() <= 1 << 20, f"block cache {cache.get_usage()} bytes > its 1 MB capacity"
                assert wbm.get_usage() <= working.MEMTABLE_BUDGET_BYTES
        assert cache.get_usage() > 512 << 10      # the copies did read through the shared cache
    finally:
        cache.set_capacity(working.BLOCK_CACHE_BYTES)

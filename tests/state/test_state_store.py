"""One suite for every provider (memory; rocksdb with changelog checkpointing on and off), each
with its checkpoint on the local disk and on the S3 server."""
import os
import random
import signal
import subprocess
import sys

import pytest

from state_testutil import ROOT, STORAGES, checkpoint_url, store_names
from crash_commit import apply_batch, model_batch
from state import StateStoreError, files, make_provider
from state.encoding import decode_key, encode_key, encode_prefix

K = encode_key


def content(store) -> dict:
    return dict(store.iter_all())


def build(provider, upto: int, op="op", part=0) -> list[dict]:
    """Commit versions 0..upto with apply_batch; returns the model of each version."""
    models, model = [], {}
    store = provider.open(op, part, -1)
    for v in range(upto + 1):
        apply_batch(store, v)
        model_batch(model, v)
        assert store.commit(v) == v
        models.append(dict(model))
    store.close()
    return models


def test_basic_ops_and_versions(make):
    p = make()
    s = p.open("op", 0, -1)
    assert s.version == -1 and s.get(K((1,))) is None and p.latest_version("op", 0) == -1
    s.put(K((1,)), b"a"); s.put(K((2,)), b"b"); s.put(K((1,)), b"a2")
    s.delete(K((3,)))
    assert s.get(K((1,))) == b"a2"
    assert s.multi_get([K((1,)), K((3,)), K((2,))]) == [b"a2", None, b"b"]
    assert s.commit(0) == 0 and s.version == 0
    s.delete(K((2,)))
    assert s.commit(1) == 1
    assert p.latest_version("op", 0) == 1
    s.close()
    fresh = make(local="w2")
    assert content(fresh.open("op", 0, 0)) == {K((1,)): b"a2", K((2,)): b"b"}
    assert content(fresh.open("op", 0, 1)) == {K((1,)): b"a2"}
    assert content(fresh.open("op", 0, -1)) == {}


def test_commit_version_must_follow_loaded(make):
    s = make().open("op", 0, -1)
    with pytest.raises(StateStoreError, match="expected 0"):
        s.commit(1)


def test_scans_are_ordered_and_merge_uncommitted(make):
    p = make()
    s = p.open("op", 0, -1)
    for t in range(10):
        for g in ("b", "a", "ab"):
            s.put(K((t, g)), f"{t}{g}".encode())
    s.commit(0)
    s.put(K((3, "aa")), b"new"); s.delete(K((3, "b"))); s.put(K((3, "a")), b"upd")
    assert [decode_key(k)[1] for k, _ in s.prefix_scan(encode_prefix((3,)))] == ["a", "aa", "ab"]
    assert dict(s.prefix_scan(encode_prefix((3, "a")))) == {K((3, "a")): b"upd"}
    rng = [decode_key(k) for k, _ in s.range_scan(K((2,)), K((4,)))]
    assert rng == sorted(rng) and {t for t, _ in rng} == {2, 3} and len(rng) == 6
    all_keys = [k for k, _ in s.iter_all()]
    assert all_keys == sorted(all_keys) and len(all_keys) == 30
    # writing while scanning is allowed
    for k, _ in s.range_scan(None, K((5,))):
        s.delete(k)
    assert [decode_key(k)[0] for k, _ in s.iter_all()][0] == 5


def test_delete_range_is_eviction(make):
    p = make()
    s = p.open("op", 0, -1)
    for t in range(100):
        s.put(K((t, "g")), b"v")
    s.commit(0)
    assert s.delete_range(None, K((40,))) == 40
    assert s.delete_range(K((40,)), K((40,))) == 0
    m = s.metrics()
    assert (m.num_rows_total, m.num_rows_removed) == (60, 40)
    s.commit(1)
    s.close()
    assert make(local="fresh").open("op", 0, 1).metrics().num_rows_total == 60


def test_metrics_exact_and_persisted(make):
    p = make()
    s = p.open("op", 0, -1)
    for i in range(10):
        s.put(K((i,)), b"x" * 10)
    s.put(K((1,)), b"y")      # overwrite: no new row
    s.delete(K((2,))); s.delete(K((2,))); s.delete(K((99,)))
    m = s.metrics()
    assert (m.num_rows_total, m.num_rows_updated, m.num_rows_removed) == (9, 11, 1)
    assert m.memory_used_bytes > 0
    s.commit(0)
    m = s.metrics()
    assert (m.num_rows_total, m.num_rows_updated, m.num_rows_removed) == (9, 0, 0)
    s.close()
    assert make(local="fresh").open("op", 0, 0).metrics().num_rows_total == 9


def test_abort_rolls_back_to_loaded_version(make):
    p = make()
    models = build(p, 4)
    s = p.open("op", 0, 4)
    apply_batch(s, 5)
    s.delete(K((0, 1)))
    s.abort()
    assert content(s) == models[4] and s.metrics().num_rows_total == len(models[4])
    apply_batch(s, 5)
    s.close()                                   # close without commit = abort
    s = p.open("op", 0, 4)
    assert content(s) == models[4]
    apply_batch(s, 5)
    s.commit(5)
    expected = dict(models[4]); model_batch(expected, 5)
    assert content(make(local="fresh").open("op", 0, 5)) == expected


def test_redo_of_a_version_writes_a_new_token_and_keeps_the_first(make):
    p = make(snapshot_interval=2)
    models = build(p, 5)
    first4 = p.open("op", 0, 4).token
    first5 = p.open("op", 0, 5).token
    s = p.open("op", 0, 3)                      # batch 4 is redone with other content
    s.put(K(("redo",)), b"1")
    s.commit(4)
    redo4 = s.token
    s.close()
    assert redo4 not in (first4, "") and p.latest_version("op", 0) == 5
    expected = dict(models[3]); expected[K(("redo",))] = b"1"
    fresh = make(local="fresh")
    assert content(fresh.open("op", 0, 4, redo4)) == expected
    assert content(fresh.open("op", 0, 4, first4)) == models[4]      # nothing of the first attempt is gone
    assert content(fresh.open("op", 0, 5, first5)) == models[5]
    with pytest.raises(StateStoreError, match="written by 2 attempts"):
        make(local="fresh2").open("op", 0, 4)
    with pytest.raises(StateStoreError, match="version 4 of operator 'op' partition 0"):
        make(local="fresh3").open("op", 0, 4, "0" * 32)
    # the redo's lineage goes on: 5 on top of the redone 4
    s = p.open("op", 0, 4, redo4)
    s.put(K(("five",)), b"5"); s.commit(5)
    expected[K(("five",))] = b"5"
    assert content(make(local="fresh4").open("op", 0, 5, s.token)) == expected


def test_snapshot_and_changelog_reconstruction(make):
    p = make(snapshot_interval=3, retention_versions=100)
    models = build(p, 10)
    p.close()
    names = store_names(make.ckpt)
    complete = {n.split("/")[0] for n in names if n.endswith(".snapshot") or n.endswith(".snapshot/_meta.json")}
    snaps = sorted(int(n.split(".")[0]) for n in complete)
    assert snaps == ([3, 6, 9] if make.changelog else list(range(11)))
    for v in range(11):
        fresh = make(local=f"fresh{v}")
        assert content(fresh.open("op", 0, v)) == models[v], v
        fresh.close()


def test_retention_cleans_old_versions(make):
    p = make(snapshot_interval=2, retention_versions=3)
    models = build(p, 9)
    p.close()
    kept = {int(n.split(".")[0]) for n in store_names(make.ckpt)}
    assert min(kept) == 6                      # the newest snapshot at or below 9 - 3 + 1 = 7
    if make.storage == "local":                # no emptied snapshot directories stay behind
        assert {int(n.split(".")[0]) for n in os.listdir(os.path.join(make.ckpt, "state", "op", "0"))} == kept
    fresh = make(local="fresh")
    for v in range(7, 10):
        assert content(fresh.open("op", 0, v)) == models[v]
    with pytest.raises(StateStoreError, match=r"version 2 of operator 'op' partition 0"):
        fresh.open("op", 0, 2)


def test_partitions_and_operators_are_independent(make):
    p = make()
    a = build(p, 2, op="agg", part=0)
    s = p.open("agg", 1, -1)
    s.put(K(("only1",)), b"x"); s.commit(0); s.close()
    assert content(p.open("agg", 0, 2)) == a[2]
    assert content(p.open("agg", 1, 0)) == {K(("only1",)): b"x"}
    assert p.latest_version("dedup", 0) == -1


def test_empty_commits(make):
    """Commits without changes write no file (their token is derived from the parent's), except
    at versions due for a snapshot; the token alone loads them."""
    p = make(snapshot_interval=5)
    s = p.open("op", 0, -1)
    for v in range(12):
        s.commit(v)
    assert s.metrics().num_rows_total == 0
    token = s.token
    s.close()
    assert token.endswith("~1")
    assert sorted({int(n.split(".")[0]) for n in store_names(make.ckpt)}) == [5, 10]
    assert content(make(local="fresh").open("op", 0, 11, token)) == {}
    with pytest.raises(StateStoreError, match="pass the token the commit log records"):
        make(local="fresh2").open("op", 0, 11)


def test_untouched_versions_write_nothing_and_load_by_their_token(make):
    """A partition the batch did not touch: commits of no changes write no file and no RocksDB data;
    every one of them loads by its token (in this provider and in a fresh one), a touched version
    on top of them records the right parent, a redo of an untouched batch gives the same token,
    and retention keeps every version still needed."""
    p = make(snapshot_interval=4, retention_versions=3)
    s = p.open("op", 0, -1)
    model, models, tokens = {}, {}, {}
    for v in range(23):
        if v % 7 in (0, 3):                     # touched at 0, 3, 7, 10, 14, 17, 21
            apply_batch(s, v)
            model_batch(model, v)
        assert s.commit(v) == v
        models[v], tokens[v] = dict(model), s.token
        s = p.open("op", 0, v, tokens[v])
    s.close()
    written = {int(n.split(".")[0]) for n in store_names(make.ckpt)}
    touched = {v for v in range(23) if v % 7 in (0, 3)}
    assert written - touched <= {v for v in range(23) if v % 4 == 0}      # only snapshot versions besides
    assert 22 not in written and 11 not in written and "~" in tokens[22]
    for v in (22, 21, 20, 19, 18):
        assert content(p.open("op", 0, v, tokens[v])) == models[v], v
    fresh = make(local="fresh")
    for v in (22, 20, 19, 18):
        assert content(fresh.open("op", 0, v, tokens[v])) == models[v], v
    # a redo of batch 23 (untouched) from 22: the same derived token both times
    r1 = fresh.open("op", 0, 22, tokens[22]); r1.commit(23); t23 = r1.token; r1.close()
    r2 = fresh.open("op", 0, 22, tokens[22]); r2.commit(23)
    assert r2.token == t23 and content(r2) == models[22]
    r2.close()


def test_random_operations_match_a_model(make):
    rng = random.Random(7)
    p = make(snapshot_interval=4, retention_versions=50)
    store, model, committed, version = p.open("op", 0, -1), {}, [], -1
    for batch in range(25):
        pending = dict(model)
        for _ in range(rng.randint(0, 60)):
            k = K((rng.randint(0, 40), rng.choice("xyz")))
            r = rng.random()
            if r < 0.6:
                v = rng.randbytes(rng.randint(0, 8)); store.put(k, v); pending[k] = v
            elif r < 0.9:
                store.delete(k); pending.pop(k, None)
            else:
                lo, hi = sorted(rng.sample(range(42), 2))
                n = store.delete_range(K((lo,)), K((hi,)))
                gone = [x for x in pending if K((lo,)) <= x < K((hi,))]
                assert n == len(gone)
                for x in gone:
                    del pending[x]
        assert content(store) == pending and store.metrics().num_rows_total == len(pending)
        if rng.random() < 0.2:
            store.abort()
        else:
            version += 1; store.commit(version); model = pending; committed.append(dict(model))
        assert list(store.iter_all()) == sorted(model.items())
    store.close()
    fresh = make(local="fresh", snapshot_interval=4, retention_versions=50)
    for v in range(version + 1):
        assert content(fresh.open("op", 0, v)) == committed[v]


def test_unknown_provider():
    with pytest.raises(ValueError, match="unknown state_store 'lsm'"):
        make_provider("lsm", "/tmp/x")


# --- crashes: a subprocess SIGKILLs itself between two commit steps --------------------

# RocksDB checkpoint snapshots on the local disk hard-link the checkpoint's files and write only
# _meta.json with put (rocksdb_provider._upload_snapshot): there "put:before:2" (changelog on) and
# "put:before:1" (off) stop a snapshot with every file linked but no _meta.json; on S3 each file
# is a put, so the points stop it before its first object and, "put:before:3", part-way. A rows
# snapshot (a small version: the default) is two puts everywhere, rows.arrow then _meta.json.
# Keys: (provider, changelog checkpointing, rows_snapshot_max); 0 = always a RocksDB checkpoint.
CRASH_POINTS = {
    ("memory", True, None): ["put:before:1", "put:after:1", "_write_snapshot:before:1", "put:before:2",
                             "put:after:2", "_cleanup:before:1"],
    ("rocksdb", True, 0): ["put:before:1", "put:after:1", "_apply_local:before:1", "_apply_local:after:1",
                           "_upload_snapshot:before:1", "put:before:2", "put:before:3", "_cleanup:before:1"],
    ("rocksdb", False, 0): ["_apply_local:after:1", "put:before:1", "put:after:1", "put:before:3",
                            "_cleanup:before:1"],
    ("rocksdb", True, 4096): ["put:before:1", "put:after:1", "_apply_local:after:1", "_upload_snapshot:before:1",
                              "put:before:2", "put:after:2", "put:before:3", "_cleanup:before:1"],
    ("rocksdb", False, 4096): ["_apply_local:after:1", "put:before:1", "put:after:1", "put:before:2",
                               "_cleanup:before:1"],
}
LOCAL_PUTS = {("rocksdb", True, 0): 2, ("rocksdb", False, 0): 1}   # puts of a local checkpoint snapshot commit
CRASH_CASES = [(n, c, r, pt) for (n, c, r), pts in CRASH_POINTS.items() for pt in pts]


def run_commit(name, changelog, ckpt, local, version, crash=None, parent=None, rows_max=None):
    """(exit code, new token) of one commit in a subprocess."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("CRASH_AT", None)
    if crash:
        env["CRASH_AT"] = crash
    script = os.path.join(os.path.dirname(__file__), "crash_commit.py")
    r = subprocess.run([sys.executable, script, name, "1" if changelog else "0", ckpt, local,
                        str(version), "3", parent or "-"] + ([] if rows_max is None else [str(rows_max)]),
                       env=env, capture_output=True, text=True)
    assert r.returncode in (0, -signal.SIGKILL), r.stderr
    return r.returncode, r.stdout.strip()


@pytest.mark.faults
@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("name,changelog,rows_max,crash", CRASH_CASES)
def test_crash_between_commit_steps(request, tmp_path, storage, name, changelog, rows_max, crash):
    target, _, nth = crash.split(":")
    if storage == "local" and target == "put" and int(nth) > LOCAL_PUTS.get((name, changelog, rows_max), 99):
        pytest.skip("a local RocksDB checkpoint snapshot makes fewer puts (its files are hard-linked)")
    ckpt, local = checkpoint_url(request, tmp_path, storage), str(tmp_path / "local")
    conf = {"changelog_checkpointing": changelog, "snapshot_interval": 3, "local_dir": local}
    if rows_max is not None:
        conf["rows_snapshot_max"] = rows_max
    with make_provider(name, ckpt, **conf) as p:
        models = build(p, 2)                     # versions 0..2; version 3 is a snapshot version
        parent = p.open("op", 0, 2).token
    model3 = dict(models[2]); model_batch(model3, 3)

    assert run_commit(name, changelog, ckpt, local, 3, crash, parent, rows_max)[0] == -signal.SIGKILL, crash
    with make_provider(name, ckpt, **conf) as p:   # same working copy as the killed process
        latest = p.latest_version("op", 0)
        assert latest in (2, 3)
        if latest == 3:
            assert content(p.open("op", 0, 3)) == model3
        s = p.open("op", 0, 2, parent)
        assert content(s) == models[2]
        apply_batch(s, 3)                            # the redo
        assert s.commit(3) == 3
        token = s.token
        s.close()
        assert content(p.open("op", 0, 3, token)) == model3
    with make_provider(name, ckpt, **dict(conf, local_dir=str(tmp_path / "fresh"))) as p:
        assert p.latest_version("op", 0) == 3
        assert content(p.open("op", 0, 3, token)) == model3


@pytest.mark.faults
@pytest.mark.parametrize("name,changelog", [("memory", True), ("rocksdb", True), ("rocksdb", False)])
def test_redo_in_a_new_process_after_crash_gives_same_version(tmp_path, name, changelog):
    ckpt, local = str(tmp_path / "ckpt"), str(tmp_path / "local")
    rc, t0 = run_commit(name, changelog, ckpt, local, 0)
    assert rc == 0
    assert run_commit(name, changelog, ckpt, local, 1, "put:after:1", t0)[0] == -signal.SIGKILL
    rc, t1 = run_commit(name, changelog, ckpt, local, 1, parent=t0)      # redo in another process
    assert rc == 0
    rc, t2 = run_commit(name, changelog, ckpt, local, 2, parent=t1)
    assert rc == 0
    model = {}
    for v in range(3):
        model_batch(model, v)
    conf = {"changelog_checkpointing": changelog, "local_dir": str(tmp_path / "fresh")}
    with make_provider(name, ckpt, **conf) as p:
        assert content(p.open("op", 0, 2, t2)) == model


# --- RocksDB with changelog checkpointing: snapshots are copied in the background -------------
def test_background_snapshot_lands_and_a_failed_one_leaves_versions_loadable(tmp_path, monkeypatch, caplog):
    from state.rocksdb_provider import RocksDBStateStoreProvider
    ckpt = str(tmp_path / "ckpt")
    conf = {"changelog_checkpointing": True, "snapshot_interval": 2, "local_dir": str(tmp_path / "local")}
    with make_provider("rocksdb", ckpt, **conf) as p:
        models = build(p, 2)                     # version 2 is a snapshot version
    def snapshots():
        return {n.split(".")[0] for n in store_names(ckpt) if n.endswith(".snapshot/_meta.json")}
    assert snapshots() == {"2"}                    # close() waited for the copy

    def fail(*a, **kw):
        raise OSError("disk full")
    monkeypatch.setattr(RocksDBStateStoreProvider, "_upload_snapshot", staticmethod(fail))
    with make_provider("rocksdb", ckpt, **conf) as p:
        s = p.open("op", 0, 2)
        model = dict(models[2])
        for v in (3, 4):                         # 4 is a snapshot version: its copy fails
            apply_batch(s, v)
            model_batch(model, v)
            assert s.commit(v) == v
            s = p.open("op", 0, v, s.token)
        assert content(s) == model
        token = s.token
    assert snapshots() == {"2"}
    assert "snapshot of operator 'op' partition 0 was not written" in caplog.text
    monkeypatch.undo()
    fresh = dict(conf, local_dir=str(tmp_path / "fresh"))   # rebuilt from 2.snapshot + changelogs 3, 4
    with make_provider("rocksdb", ckpt, **fresh) as p:
        assert content(p.open("op", 0, 4, token)) == model


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("changelog", [True, False])
def test_small_versions_snapshot_as_rows_larger_ones_as_rocksdb_checkpoints(request, tmp_path, storage, changelog):
    """A snapshot version with at most rows_snapshot_max rows is one rows.arrow file (no RocksDB
    checkpoint: rocksdict holds the GIL through one), a larger one a RocksDB checkpoint; a fresh
    working copy rebuilt from either, plus the changelogs after it, holds exactly the model."""
    import json
    from increments import storage as st
    ckpt = checkpoint_url(request, tmp_path, storage)
    conf = {"changelog_checkpointing": changelog, "snapshot_interval": 2, "retention_versions": 100,
            "rows_snapshot_max": 16}
    with make_provider("rocksdb", ckpt, local_dir=str(tmp_path / "w"), **conf) as p:
        models = build(p, 7)                         # rows per version: 5, 10, 14, 18, 22, ...
        tokens = [p.resolve("op", 0, v, None) for v in range(8)]
    loc = st.location(ckpt).child("state", "op", "0")
    names = store_names(ckpt)
    formats = {}
    for n in names:
        if n.endswith(".snapshot/_meta.json"):
            meta = json.loads(loc.read_bytes(n))
            formats[meta["version"]] = (meta.get("format", "rocksdb"), meta["rows"])
            rows_files = [m for m in names if m.startswith(n.split("/")[0] + "/") and m.endswith("/rows.arrow")]
            assert bool(rows_files) == (meta.get("format") == "rows")
    assert formats, names
    for v, (fmt, rows) in formats.items():
        assert rows == len(models[v])
        assert fmt == ("rows" if rows <= 16 else "rocksdb"), (v, fmt, rows)
    assert {f for f, _ in formats.values()} == {"rows", "rocksdb"}
    for v in range(8):                               # each version rebuilt in a fresh working copy
        with make_provider("rocksdb", ckpt, local_dir=str(tmp_path / f"fresh{v}"), **conf) as p:
            assert content(p.open("op", 0, v, tokens[v])) == models[v]


@pytest.mark.parametrize("name,kind", [("memory", "delta"), ("rocksdb", "changelog")])
def test_a_checkpoint_of_an_earlier_release_without_tokens_loads_and_goes_on(tmp_path, name, kind):
    from increments import storage
    from state import files
    loc = storage.location(str(tmp_path / "ckpt")).child("state", "op", "0")
    model = {}
    for v in range(3):                          # <v>.delta / <v>.changelog, no token in the name, no parent
        before = dict(model)
        model_batch(model, v)
        keys = sorted(set(before) | set(model))
        loc.write_bytes(f"{v}.{kind}", files.encode_rows(
            keys, [model.get(k) for k in keys], {"version": v, "token": files.new_token(), "rows": len(model)}))
    with make_provider(name, str(tmp_path / "ckpt"), local_dir=str(tmp_path / "w")) as p:
        s = p.open("op", 0, 2)
        assert content(s) == model
        apply_batch(s, 3); model_batch(model, 3)
        s.commit(3)
        token = s.token
    with make_provider(name, str(tmp_path / "ckpt"), local_dir=str(tmp_path / "fresh")) as p:
        assert content(p.open("op", 0, 3, token)) == model


def hold_snapshot_uploads(monkeypatch):
    """The RocksDB provider's snapshot uploads wait (then run as usual) until the returned event is set."""
    import threading
    from state.rocksdb_provider import RocksDBStateStoreProvider
    release = threading.Event()
    upload = RocksDBStateStoreProvider._upload_snapshot

    def slow(*a, **kw):
        assert release.wait(120)
        upload(*a, **kw)
    monkeypatch.setattr(RocksDBStateStoreProvider, "_upload_snapshot", staticmethod(slow))
    return release


def test_batches_go_on_while_a_snapshot_is_uploaded(tmp_path, monkeypatch):
    release = hold_snapshot_uploads(monkeypatch)
    conf = {"changelog_checkpointing": True, "snapshot_interval": 2, "local_dir": str(tmp_path / "local")}
    with make_provider("rocksdb", str(tmp_path / "ckpt"), **conf) as p:
        models = build(p, 2)                     # version 2's snapshot is held back
        s = p.open("op", 0, 2)
        model = dict(models[2])
        apply_batch(s, 3); model_batch(model, 3)
        s.commit(3)                              # the next batch neither waits for it ...
        s = p.open("op", 0, 3, s.token)          # ... nor does the next open
        assert content(s) == model
        pending = p._uploads[("op", 0)]
        assert not pending.done()
        release.set()
    assert pending.done() and pending.exception() is None
    assert any(n.startswith("2.") and n.endswith("/_meta.json") for n in store_names(str(tmp_path / "ckpt")))


@pytest.mark.parametrize("rows_max", [4096, 0])
def test_close_completes_every_snapshot_and_closes_every_working_copy(tmp_path, monkeypatch, rows_max):
    """close() with snapshot jobs still running on three partitions (rows format, or a RocksDB
    checkpoint with rows_snapshot_max=0): every snapshot is complete afterwards, and every working
    copy was closed holding its version (a new provider claims each and finds it current)."""
    release = hold_snapshot_uploads(monkeypatch)
    conf = {"changelog_checkpointing": True, "snapshot_interval": 2, "local_dir": str(tmp_path / "local"),
            "rows_snapshot_max": rows_max}
    p = make_provider("rocksdb", str(tmp_path / "ckpt"), **conf)
    models, tokens = {}, {}
    for part in range(3):
        models[part] = build(p, 2, part=part)[2]            # version 2's snapshots are held back
        tokens[part] = p.open("op", part, 2).token
    import threading
    closer = threading.Thread(target=p.close)
    closer.start()
    closer.join(0.2)
    release.set()
    closer.join(120)
    assert not closer.is_alive()
    for part in range(3):
        snap = tmp_path / "ckpt" / "state" / "op" / str(part) / files.snapshot_name(2, tokens[part])
        assert (snap / files.META).exists()
        assert (snap / "rows.arrow").exists() == (rows_max > 0)
    with make_provider("rocksdb", str(tmp_path / "ckpt"), **conf) as q:
        for part in range(3):
            q.warm("op", part)
            w = q._working[("op", part)]
            assert not w.private and (w.version, w.token) == (2, tokens[part])
            assert content(q.open("op", part, 2, tokens[part])) == models[part]


def test_cleanup_removes_temp_files_a_killed_local_write_left(tmp_path):
    d = tmp_path / "ckpt" / "state" / "op" / "0"
    d.mkdir(parents=True)
    old, new = d / ".tmp-killed", d / ".tmp-in-flight"
    old.write_bytes(b"x"); new.write_bytes(b"y")
    os.utime(old, (1, 1))                        # written long ago
    with make_provider("memory", str(tmp_path / "ckpt"), snapshot_interval=2) as p:
        build(p, 2)                              # 2 is a cleanup version
    assert not old.exists() and new.exists()


@pytest.mark.parametrize("name", ["memory", "rocksdb"])
def test_local_listing_matches_the_location_list(tmp_path, name):
    """list_store's names-only scan of a local store directory sees what the Location's list()
    sees: logs, complete and partial snapshots (file or directory), no temp files."""
    from increments import storage
    from state import files
    ckpt, local = str(tmp_path / "ckpt"), str(tmp_path / "local")
    with make_provider(name, ckpt, snapshot_interval=3, retention_versions=100, local_dir=local) as p:
        build(p, 7)
    loc = storage.location(ckpt).child("state", "op", "0")
    root = loc.local_path()
    os.makedirs(os.path.join(root, "8.abc.snapshot"))                 # partial: no _meta.json
    open(os.path.join(root, "8.abc.snapshot", "CURRENT"), "w").close()
    open(os.path.join(root, ".tmp-x"), "w").close()
    os.makedirs(os.path.join(root, "9.changelog.dir"))                # not a store object
    open(os.path.join(root, "9.changelog.dir", "f"), "w").close()
    fast = files.list_store(loc)
    orig = loc.local_path
    loc.local_path = lambda name="": None if name == "" else orig(name)   # force the list() path
    slow = files.list_store(loc)
    assert fast == slow
    assert fast.snapshots and (8, "abc") in fast.partial and fast.latest() == 7


def test_is_cached_names_exactly_what_the_provider_holds(make):
    """is_cached (the hint the StateManager uses to open on its own thread) is true only for the
    (version, token) the provider just committed or loaded; a fresh provider holds nothing."""
    p = make()
    models = build(p, 3)
    s = p.open("op", 0, 3)
    t3 = s.token
    assert p.is_cached("op", 0, 3, t3)
    assert not p.is_cached("op", 0, 3, "f" * 32 + "-1") and not p.is_cached("op", 0, 2, t3)
    assert not p.is_cached("op", 0, 3, None) and not p.is_cached("op", 1, 3, t3)
    apply_batch(s, 4)
    assert s.commit(4) == 4
    t4 = s.token
    s.close()
    assert p.is_cached("op", 0, 4, t4) and not p.is_cached("op", 0, 3, t3)
    model4 = dict(models[3]); model_batch(model4, 4)
    assert content(p.open("op", 0, 4, t4)) == model4
    fresh = make(local="fresh")
    assert not fresh.is_cached("op", 0, 4, t4)
    assert content(fresh.open("op", 0, 4, t4)) == model4 and fresh.is_cached("op", 0, 4, t4)


def test_a_snapshot_s_temp_directory_left_by_a_crash_is_ignored_then_removed(tmp_path):
    """A local RocksDB snapshot is built as ``.tmp-<v>.<token>.snapshot`` inside the store
    directory and renamed: one a killed process left is never listed or loaded, and cleanup
    removes it once it is an hour old (a younger one may belong to a snapshot in progress)."""
    import time

    from increments import storage
    from state import files
    ckpt = str(tmp_path / "ckpt")
    conf = {"snapshot_interval": 2, "retention_versions": 2, "local_dir": str(tmp_path / "w")}
    with make_provider("rocksdb", ckpt, **conf) as p:
        models = build(p, 3)
    root = storage.location(ckpt).child("state", "op", "0").local_path()
    old, young = os.path.join(root, ".tmp-1.dead.snapshot"), os.path.join(root, ".tmp-2.live.snapshot")
    for d in (old, young):
        os.makedirs(d)
        open(os.path.join(d, "CURRENT"), "w").close()
    an_hour_ago = time.time() - 3700
    os.utime(old, (an_hour_ago, an_hour_ago))
    assert not [n for n in store_names(ckpt) if ".tmp-" in n]
    assert files.list_store(storage.location(ckpt).child("state", "op", "0")).latest() == 3
    with make_provider("rocksdb", ckpt, **dict(conf, local_dir=str(tmp_path / "fresh"))) as p:
        s = p.open("op", 0, 3)
        assert content(s) == models[3]
        apply_batch(s, 4)
        s.commit(4)                               # a snapshot version: its job runs the cleanup
    assert not os.path.exists(old) and os.path.exists(young)
    assert not [n for n in os.listdir(root) if n.startswith(".tmp-4.")]   # its own temp dir was renamed
    assert any(n.startswith("4.") and n.endswith(".snapshot") for n in os.listdir(root))


def test_put_many_is_the_put_loop(make):
    """A batch's groups written in bulk (put_many, after multi_get as the operators do) leave the
    same content, row counts, ordered scans, changelog and abort as one put per key, on every
    provider, whether the keys are new, stored, or already changed in the batch."""
    p = make()
    s = p.open("op", 0, -1)
    first = [K((i,)) for i in range(0, 6000, 2)]              # 3000 new keys (bulk: sorted in lazily)
    assert s.multi_get(first[:5]) == [None] * 5
    s.put_many(first, [b"a%d" % i for i in range(len(first))])
    s.put(K((1,)), b"single")
    m = s.metrics()
    assert (m.num_rows_total, m.num_rows_updated) == (3001, 3001)
    assert [k for k, _ in s.range_scan(K((10,)), K((15,)))] == [K((10,)), K((12,)), K((14,))]
    s.commit(0)
    model = {k: b"a%d" % i for i, k in enumerate(first)} | {K((1,)): b"single"}
    # batch 1: stored keys, new keys and keys the batch already changed, in one put_many
    s.put(K((4,)), b"changed"); s.delete(K((6,)))
    keys = [K((i,)) for i in range(0, 12, 1)] + [K((7001,))]
    old = s.multi_get(keys)
    assert old[0] == model[K((0,))] and old[1] == b"single" and old[4] == b"changed" and old[6] is None
    s.put_many(keys, [b"b" + k for k in keys])
    model.pop(K((6,)))
    model.update({k: b"b" + k for k in keys})
    m = s.metrics()
    assert m.num_rows_total == len(model)
    assert content(s) == model
    assert [k for k, _ in s.iter_all()] == sorted(model)
    s.commit(1)
    s.put_many([K((99999,))], [b"gone"])
    s.abort()
    assert content(s) == model and s.metrics().num_rows_total == len(model)
    s.close()
    fresh = make(local="w2").open("op", 0, 1)
    assert content(fresh) == model and fresh.metrics().num_rows_total == len(model)


def test_delete_many_is_the_delete_loop(make):
    """Eviction in bulk (delete_many, and delete_range through it) removes what one delete per key
    removes: stored keys, keys the batch put, keys that are absent; counts each removed row once."""
    p = make()
    s = p.open("op", 0, -1)
    s.put_many([K((i,)) for i in range(5000)], [b"v%d" % i for i in range(5000)])
    s.commit(0)
    s.put(K((7000,)), b"new")                                  # put in this batch, then deleted in bulk
    s.put(K((3,)), b"changed")
    gone = [K((i,)) for i in range(0, 4000)] + [K((7000,)), K((9999,))]   # 9999 is absent
    s.delete_many(gone)
    m = s.metrics()
    assert (m.num_rows_total, m.num_rows_removed) == (1000, 4001)
    assert [k for k, _ in s.iter_all()] == [K((i,)) for i in range(4000, 5000)]
    assert s.delete_range(K((4500,)), None) == 500
    assert s.metrics().num_rows_total == 500
    s.commit(1)
    s.close()
    fresh = make(local="w2").open("op", 0, 1)
    assert content(fresh) == {K((i,)): b"v%d" % i for i in range(4000, 4500)}
    fresh.close()
    again = p.open("op", 0, 0)                                 # abort of a bulk delete
    again.delete_many([K((i,)) for i in range(10)])
    again.abort()
    assert len(content(again)) == 5000 and again.metrics().num_rows_total == 5000


def test_insert_many_and_pop_range_keys_are_the_loop(make):
    """insert_many (keys read as absent) and pop_range_keys (an eviction that needs the keys) leave
    what put and range_keys + delete leave: content, counts, ordered scans, changelog and abort, on
    every provider, also when a bulk write is the batch's only write (its lists are the changelog)."""
    p = make()
    s = p.open("op", 0, -1)
    first = [K((i,)) for i in range(0, 6000, 2)]
    s.insert_many(first, [b"a%d" % i for i in range(len(first))])      # the batch's only write
    s.commit(0)
    model = {k: b"a%d" % i for i, k in enumerate(first)}
    assert content(make(local="w1").open("op", 0, 0)) == model
    more = [K((i,)) for i in range(1, 3001, 2)]                         # new keys among the stored ones
    assert s.multi_get(more[:3]) == [None] * 3
    s.insert_many(more, [b"m" + k for k in more])
    model.update({k: b"m" + k for k in more})
    got = s.pop_range_keys(K((100,)), K((2100,)))
    assert got == sorted(k for k in model if K((100,)) <= k < K((2100,)))
    for k in got:
        model.pop(k)
    m = s.metrics()
    assert (m.num_rows_total, m.num_rows_updated, m.num_rows_removed) == (len(model), len(more), len(got))
    assert [k for k, _ in s.iter_all()] == sorted(model)
    assert s.pop_range_keys(K((100,)), K((2100,))) == []
    s.commit(1)
    assert content(make(local="w2").open("op", 0, 1)) == model
    head = s.pop_range_keys(None, K((50,)))                             # the batch's only write: a bulk delete
    assert head == sorted(k for k in model if k < K((50,)))
    s.commit(2)
    for k in head:
        model.pop(k)
    assert content(make(local="w3").open("op", 0, 2)) == model
    s.pop_range_keys(None, None)
    s.insert_many([K((-1,))], [b"x"])
    s.abort()
    assert content(s) == model and s.metrics().num_rows_total == len(model)
    assert [k for k, _ in s.iter_all()] == sorted(model)


def test_remove_many_is_the_delete_loop_for_stored_keys(make):
    """remove_many (keys the caller knows are stored: an eviction through a side index) leaves what
    delete leaves: content, counts, changelog; also for keys the batch itself put."""
    p = make()
    s = p.open("op", 0, -1)
    s.put_many([K((i,)) for i in range(4000)], [b"v%d" % i for i in range(4000)])
    s.commit(0)
    s.put(K((5000,)), b"new")
    gone = [K((i,)) for i in range(3999, -1, -3)] + [K((5000,))]      # not in key order
    s.remove_many(gone)
    model = {K((i,)): b"v%d" % i for i in range(4000)}
    for k in gone[:-1]:
        model.pop(k)
    m = s.metrics()
    assert (m.num_rows_total, m.num_rows_removed) == (len(model), len(gone))
    assert [k for k, _ in s.iter_all()] == sorted(model)
    s.commit(1)
    assert content(make(local="w2").open("op", 0, 1)) == model


def test_a_popped_range_then_puts_in_it(make):
    """An eviction that empties a range (pop_range_keys) and puts inside that range afterwards in the
    same batch: the store that committed (RocksDB: its working copy, where the range is one range
    tombstone), a reload from the checkpoint and the next batch all hold the puts and none of the
    popped rows."""
    p = make()
    s = p.open("op", 0, -1)
    keys = [K((i,)) for i in range(5000)]
    s.insert_many(keys, [b"v%d" % i for i in range(5000)])
    s.commit(0)
    model = {k: b"v%d" % i for i, k in enumerate(keys)}
    got = s.pop_range_keys(None, K((3000,)))
    assert got == keys[:3000]
    s.put(K((10,)), b"back")                              # inside the popped range
    s.put_many([K((20,)), K((6000,))], [b"again", b"new"])
    s.delete(K((4000,)))                                  # outside it
    for k in got:
        model.pop(k)
    model.update({K((10,)): b"back", K((20,)): b"again", K((6000,)): b"new"})
    model.pop(K((4000,)))
    s.commit(1)
    assert content(s) == model and s.metrics().num_rows_total == len(model)
    assert [k for k, _ in s.iter_all()] == sorted(model)
    assert s.multi_get([K((5,)), K((10,)), K((2999,))]) == [None, b"back", None]
    assert content(make(local="w2").open("op", 0, 1)) == model
    assert s.pop_range_keys(K((15,)), K((3000,))) == [K((20,))]      # the next batch, on the same copy
    model.pop(K((20,)))
    s.commit(2)
    assert content(s) == model
    assert content(make(local="w3").open("op", 0, 2)) == model


def _logs(provider, op: str) -> dict:
    """{version: (rows, keys, values)} of every log file of (op, partition 0)."""
    loc = provider.store_loc(op, 0)
    listing = files.list_store(loc)
    out = {}
    for (v, _), name in listing.logs.items():
        meta, keys, values = files.decode_rows(loc.read_bytes(name))
        out[v] = (meta["rows"], keys, values)
    return out


def test_insert_columns_is_insert_many(make):
    """insert_columns (Arrow arrays, kept as such by the memory store until a keyed access) with range
    pops, keyed reads and writes between them, and an abort: every version's content, counts and
    changelog rows (in order) equal those of the same batches written by insert_many."""
    import pyarrow as pa
    p = make()
    cols, rows = p.open("cols", 0, -1), p.open("rows", 0, -1)
    nxt = [0]

    def fresh(n):
        keys = [K((nxt[0] + i, (nxt[0] + i) * 7 % 1000)) for i in range(n)]
        nxt[0] += n
        return keys

    def both(fn):
        fn(cols, True)
        fn(rows, False)

    def insert(keys):
        vals = [b"v" + k[-2:] for k in keys]

        def f(s, arrow):
            if arrow:
                s.insert_columns(pa.array(keys, pa.binary()), pa.array(vals, pa.binary()))
            else:
                s.insert_many(keys, vals)
        return f

    def pop(end, start=None):
        got = []
        both(lambda s, arrow: got.append(s.pop_range_keys(start and K((start,)), K((end,)))))
        assert got[0] == got[1]

    for v in range(12):
        both(insert(fresh(700)))
        kind = v % 4
        if kind == 0:
            pop(nxt[0] - 650)                                   # mostly the batch's own rows
        elif kind == 1:
            pop(nxt[0] - 900, nxt[0] - 1500)                    # the committed runs', a bounded range
        elif kind == 2:                                         # a keyed read between: into the dict
            pop(nxt[0] - 1000)
            assert cols.get(K((nxt[0] - 1, (nxt[0] - 1) * 7 % 1000))) is not None
            both(lambda s, arrow: s.put(K((nxt[0] - 2, 5)), b"x"))
            pop(nxt[0] - 300)
        else:                                                   # a batch aborted, then done again
            pop(nxt[0] - 200)
            both(lambda s, arrow: s.abort())
            pop(nxt[0] - 400)
            assert [k for k, _ in cols.range_scan(None, K((nxt[0],)))] == [k for k, _ in rows.range_scan(None, K((nxt[0],)))]
        assert cols.metrics().num_rows_total == rows.metrics().num_rows_total
        assert cols.metrics().num_rows_removed == rows.metrics().num_rows_removed
        cols.commit(v)
        rows.commit(v)
        assert content(cols) == content(rows)
    assert _logs(p, "cols") == _logs(p, "rows")
    q = make(local="w2")
    assert content(q.open("cols", 0, 11)) == content(q.open("rows", 0, 11)) == content(cols)


def test_remove_columns_is_remove_many(make):
    """remove_columns (an Arrow array of stored keys, removed by the memory store from the arrays it
    keeps) after insert_columns, over 12 batches: keys of the batch's own rows, of committed runs and of
    rows in the dict (after a keyed read or a reload), in shuffled order, with a range pop and an
    abort between: every version's content, counts and changelog rows (in order)
    equal those of the same batches written by insert_many and remove_many."""
    import random

    import pyarrow as pa
    p = make()
    cols, rows = p.open("cols", 0, -1), p.open("rows", 0, -1)
    rnd = random.Random(11)
    stored: list[bytes] = []
    nxt = [0]

    def both(fn):
        fn(cols, True)
        fn(rows, False)

    def insert(n):
        keys = [K((nxt[0] + i, i % 3)) for i in range(n)]
        nxt[0] += n
        vals = [b"v%d" % (len(k) * 7 + i) for i, k in enumerate(keys)]
        both(lambda s, arrow: s.insert_columns(pa.array(keys, pa.binary()), pa.array(vals, pa.binary()))
             if arrow else s.insert_many(keys, vals))
        stored.extend(keys)

    def remove(n):
        gone = rnd.sample(stored, min(n, len(stored)))
        for k in gone:
            stored.remove(k)
        both(lambda s, arrow: s.remove_columns(pa.array(gone, pa.binary())) if arrow else s.remove_many(gone))

    for v in range(12):
        kind = v % 4
        saved = list(stored)
        insert(600)
        if kind == 0:
            remove(400)                                             # own rows and committed runs'
        elif kind == 1:                                             # then a keyed read: into the dict
            remove(500)
            assert cols.get(stored[0]) == rows.get(stored[0])
            remove(200)
        elif kind == 2:                                             # a range pop, then a removal
            got = []
            both(lambda s, arrow: got.append(s.pop_range_keys(None, K((nxt[0] - 1000,)))))
            assert got[0] == got[1]
            stored[:] = [k for k in stored if k not in set(got[0])]
            remove(300)
        else:                                                       # a batch aborted, then another
            remove(500)
            both(lambda s, arrow: s.abort())
            stored[:] = saved
            insert(300)
            remove(400)
        assert cols.metrics().num_rows_total == rows.metrics().num_rows_total == len(stored)
        assert cols.metrics().num_rows_removed == rows.metrics().num_rows_removed
        cols.commit(v)
        rows.commit(v)
        if v % 4 == 3:                      # an ordered read moves the rows into the dict: not every batch
            assert content(cols) == content(rows)
            assert sorted(content(cols)) == sorted(stored)
        if v == 6:                                                  # a reload: the rows in a dict
            cols, rows = make(local="w%d" % v).open("cols", 0, v), make(local="w%d" % v).open("rows", 0, v)
    assert _logs(p, "cols") == _logs(p, "rows")
    q = make(local="w2")
    assert content(q.open("cols", 0, 11)) == content(q.open("rows", 0, 11)) == content(cols)


def test_put_columns_is_put_many(make):
    """multi_get_columns then put_columns (Arrow arrays: the memory store looks the rows it keeps as
    arrays up by Arrow and replaces them by a new array) over 14 batches of keys old and new: rows
    of committed runs, of the dict (after a reload, or an ordered read), a removal and a range pop
    after the put, an abort, a batch small against the runs: every read, every version's content,
    counts and changelog rows (in order) equal those of multi_get and put_many."""
    import random

    import pyarrow as pa
    p = make()
    cols, rows = p.open("cols", 0, -1), p.open("rows", 0, -1)
    rnd = random.Random(13)
    universe = [K((i, i % 5)) for i in range(4000)]

    def put(n):
        keys = rnd.sample(universe, n)
        vals = [b"w%d-%d" % (rnd.randrange(1000), len(k)) for k in keys]
        got_c = cols.multi_get_columns(pa.array(keys, pa.binary()))
        got_r = rows.multi_get(keys)
        assert got_c == got_r
        if not any(v is not None for v in got_r) and rnd.random() < 0.5:
            cols.insert_columns(pa.array(keys, pa.binary()), pa.array(vals, pa.binary()))
            rows.insert_many(keys, vals)
        else:
            cols.put_columns(pa.array(keys, pa.binary()), pa.array(vals, pa.binary()))
            rows.put_many(keys, vals)
        return keys

    for v in range(14):
        kind = v % 5
        keys = put(1500 if kind != 4 else 300)
        if kind == 1:                                           # a removal of some just put
            gone = rnd.sample(keys, 200)
            cols.remove_columns(pa.array(gone, pa.binary()))
            rows.remove_many(gone)
        elif kind == 2:                                         # a range pop after the put
            assert cols.pop_range_keys(None, K((300,))) == rows.pop_range_keys(None, K((300,)))
        elif kind == 3:                                         # aborted, then another batch
            cols.abort()
            rows.abort()
            put(1200)
        assert cols.metrics().num_rows_total == rows.metrics().num_rows_total
        assert cols.metrics().num_rows_updated == rows.metrics().num_rows_updated
        assert cols.metrics().num_rows_removed == rows.metrics().num_rows_removed
        cols.commit(v)
        rows.commit(v)
        if v % 5 == 4:                                          # an ordered read: the rows into the dict
            assert content(cols) == content(rows)
        if v == 7:                                              # a reload: the rows in a dict
            cols, rows = make(local="w%d" % v).open("cols", 0, v), make(local="w%d" % v).open("rows", 0, v)
    assert content(cols) == content(rows)
    assert _logs(p, "cols") == _logs(p, "rows")
    q = make(local="w2")
    assert content(q.open("cols", 0, 13)) == content(q.open("rows", 0, 13)) == content(cols)

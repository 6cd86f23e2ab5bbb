"""Two attempts of one batch (a redo, or a zombie runner that lost the fence) and the object-store
cost of a batch: on the local disk and on the S3 server, for every provider."""
import pytest

from crash_commit import apply_batch, model_batch
from state_testutil import counting_location, store_names
from state import make_provider
from state.encoding import encode_key
from test_state_store import build, content

K = encode_key


def test_a_zombie_commit_of_the_same_version_leaves_the_winner_loadable(make):
    """Winner and zombie both load (5, t5) and commit 6 (a snapshot and cleanup version, retention 1:
    the most aggressive cleanup). The zombie commits last, so its cleanup runs after the winner's
    version exists; the winner's version stays loadable by its token, its files untouched, and the
    winner keeps going (more cleanups) with every version loadable on a fresh machine."""
    conf = {"snapshot_interval": 3, "retention_versions": 1}
    winner, zombie = make(local="winner", **conf), make(local="zombie", **conf)
    models = build(winner, 5)
    t5 = winner.open("op", 0, 5).token
    w, z = winner.open("op", 0, 5, t5), zombie.open("op", 0, 5, t5)
    apply_batch(w, 6)
    w.commit(6)
    tw = w.token
    winner.open("op", 0, 6, tw)               # waits for a background snapshot upload
    winners_files = {n for n in store_names(make.ckpt) if n.startswith(f"6.{tw}.")}
    assert winners_files
    z.put(K(("zombie",)), b"z")
    z.commit(6)
    tz = z.token
    zombie.close()                             # waits for the zombie's snapshot and cleanup
    assert tz != tw
    after = set(store_names(make.ckpt))
    assert winners_files <= after
    assert not [n for n in after if int(n.split(".")[0]) < 3]   # cleanup below the shared snapshot 3 ran
    model6 = dict(models[5]); model_batch(model6, 6)
    zmodel = dict(models[5]); zmodel[K(("zombie",))] = b"z"
    assert content(make(local="fresh6").open("op", 0, 6, tw)) == model6
    assert content(make(local="fresh6z").open("op", 0, 6, tz)) == zmodel
    model, token = model6, tw
    for v in range(7, 13):                     # the winner goes on: cleanups at 9 and 12
        s = winner.open("op", 0, v - 1, token)
        apply_batch(s, v); model_batch(model, v)
        s.commit(v)
        token = s.token
        fresh = make(local=f"fresh{v}")
        assert content(fresh.open("op", 0, v, token)) == model, v
        fresh.close()


def test_a_zombie_still_loading_does_not_break_the_winner(make):
    """The zombie opens an old version and commits it after the winner moved on and cleaned up:
    the winner's newest version is unaffected."""
    conf = {"snapshot_interval": 2, "retention_versions": 2}
    winner = make(local="winner", **conf)
    models = build(winner, 3)
    zombie = make(local="zombie", **conf)
    z = zombie.open("op", 0, 3)
    model, token = dict(models[3]), winner.open("op", 0, 3).token
    for v in range(4, 9):
        s = winner.open("op", 0, v - 1, token)
        apply_batch(s, v); model_batch(model, v)
        s.commit(v)
        token = s.token
    z.put(K(("late",)), b"1")
    z.commit(4)                                # version 4 was cleaned up by the winner long ago
    zombie.close()
    assert content(make(local="fresh").open("op", 0, 8, token)) == model


@pytest.mark.parametrize("name", ["memory", "rocksdb"])
def test_a_batch_between_snapshots_costs_one_request_per_partition(s3_bucket, tmp_path, name):
    from increments import storage
    counts = []
    ckpt = counting_location(storage.location(s3_bucket + "/chk"), counts)
    conf = {"snapshot_interval": 10, "local_dir": str(tmp_path / "w")}
    with make_provider(name, ckpt, **conf) as p:
        s = p.open("op", 0, -1)
        assert counts == []
        for v in range(0, 9):
            counts.clear()
            s = p.open("op", 0, v - 1, s.token if v else None)
            apply_batch(s, v)
            s.commit(v)
            assert [c[0] for c in counts] == ["write_bytes"], (v, counts)
        token = s.token
    counts.clear()
    with make_provider(name, ckpt, **conf) as p:  # a restart: the working copy is checked, not rebuilt
        s = p.open("op", 0, 8, token)
        if name == "rocksdb":                      # the token carries the rows to check it against
            assert counts == [] and s.token == token


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_a_zombie_snapshot_is_never_the_bound_of_its_cleanup(request, tmp_path, monkeypatch, storage):
    """The winner's snapshot of 6 fails (it needs the shared snapshot 3 and changelogs 4-6); the
    zombie's snapshot of 6 lands and its cleanup runs with retention 1. The zombie's own 6 would be
    the newest snapshot at or below 6 - 1 + 1, but cleanup bounds stay below the version being
    committed (the shared lineage), so the winner keeps what it needs."""
    from state_testutil import checkpoint_url
    from state.rocksdb_provider import RocksDBStateStoreProvider
    ckpt = checkpoint_url(request, tmp_path, storage)
    conf = {"changelog_checkpointing": True, "snapshot_interval": 3, "retention_versions": 1}
    winner = make_provider("rocksdb", ckpt, local_dir=str(tmp_path / "winner"), **conf)
    zombie = make_provider("rocksdb", ckpt, local_dir=str(tmp_path / "zombie"), **conf)
    try:
        models = build(winner, 5)
        t5 = winner.open("op", 0, 5).token
        w, z = winner.open("op", 0, 5, t5), zombie.open("op", 0, 5, t5)
        upload = RocksDBStateStoreProvider._upload_snapshot
        calls = []

        def first_upload_fails(local, loc, meta):
            calls.append(meta["token"])
            if len(calls) == 1:
                raise OSError("the winner's upload fails")
            upload(local, loc, meta)
        monkeypatch.setattr(RocksDBStateStoreProvider, "_upload_snapshot", staticmethod(first_upload_fails))
        apply_batch(w, 6)
        w.commit(6)
        winner._await_upload(("op", 0))         # the winner's (failing) upload is done before the zombie commits
        assert calls == [w.token]
        z.put(K(("zombie",)), b"z")
        z.commit(6)
    finally:
        winner.close()
        zombie.close()
    tw = w.token
    assert not [n for n in store_names(ckpt) if n.startswith(f"6.{tw}.snapshot")]
    model6 = dict(models[5]); model_batch(model6, 6)
    with make_provider("rocksdb", ckpt, local_dir=str(tmp_path / "fresh"), **conf) as p:
        assert content(p.open("op", 0, 6, tw)) == model6

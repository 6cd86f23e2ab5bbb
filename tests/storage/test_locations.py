"""The storage layer's contract, on the local disk and on a real S3-compatible server (moto)."""
from __future__ import annotations

import pytest

from increments import storage


@pytest.fixture(params=["local", "s3"])
def loc(request, tmp_path):
    if request.param == "local":
        return storage.location(str(tmp_path / "root"))
    return storage.location(request.getfixturevalue("s3_bucket") + "/root")


def test_write_read_and_create_only(loc):
    loc.write_json("metadata.json", {"id": "a"}, create_only=True)
    with pytest.raises(FileExistsError):
        loc.write_json("metadata.json", {"id": "b"}, create_only=True)
    assert loc.read_json("metadata.json") == {"id": "a"}
    loc.write_json("metadata.json", {"id": "c"})          # overwrite is allowed without create_only
    assert loc.read_json("metadata.json") == {"id": "c"}
    with pytest.raises(FileNotFoundError):
        loc.read_bytes("missing.json")
    assert loc.head("missing.json") is None
    assert loc.head("metadata.json").size == len(loc.read_bytes("metadata.json"))


def test_list_in_name_order_after_a_key(loc):
    d = loc.child("sources", "0")
    for name in ["b", "a", "d", "c", "sub/e"]:
        d.write_bytes(name, name.encode())
    assert [o.name for o in d.list()] == ["a", "b", "c", "d", "sub/e"]
    assert [o.name for o in d.list(start_after="b")] == ["c", "d", "sub/e"]
    files, dirs = d.list_dir()
    assert [o.name for o in files] == ["a", "b", "c", "d"] and dirs == ["sub"]
    assert [o.name for o in loc.list("sources/")] == [f"sources/0/{n}" for n in ["a", "b", "c", "d", "sub/e"]]
    d.delete("a")
    d.delete("never-there")
    assert [o.name for o in d.list()] == ["b", "c", "d", "sub/e"]
    loc.delete_prefix("sources/")
    assert loc.list() == []


def test_unknown_scheme_is_refused_naming_it():
    with pytest.raises(storage.UnknownSchemeError, match="hdfs://"):
        storage.location("hdfs://namenode/chk")


def test_secrets_never_appear_in_messages(s3_server):
    loc = storage.location("s3://no-such-bucket-here/x", {"aws_secret_access_key": "S3CR3T-VALUE-1"})
    with pytest.raises(Exception) as e:
        loc.write_bytes("a", b"1")
    assert "S3CR3T-VALUE-1" not in str(e.value)
    assert "increments-test-secret" not in storage.redact("key increments-test-secret")
    assert storage.redact("GET https://acct.blob.core.windows.net/c/x?sv=1&sig=abc") .endswith("?***")


def test_private_cache_dir_refuses_a_directory_others_can_write(tmp_path):
    p = storage.private_dir(str(tmp_path / "cache"), "state")
    assert p.startswith(str(tmp_path / "cache"))
    (tmp_path / "cache").chmod(0o777)
    with pytest.raises(storage.StorageError, match="can be written by other users"):
        storage.private_dir(str(tmp_path / "cache"))


def test_a_symlink_planted_in_the_cache_root_is_refused(tmp_path):
    """Issue 28 item 9: a link at the root, or at a directory below it, is not followed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    root = tmp_path / "cache"
    storage.private_dir(str(root))
    (root / "fetch").symlink_to(elsewhere)
    with pytest.raises(storage.StorageError, match=r"cache/fetch is a symbolic link \(to .*elsewhere\)"):
        storage.private_dir(str(root), "fetch")
    link = tmp_path / "linked-root"
    link.symlink_to(elsewhere)
    with pytest.raises(storage.StorageError, match="linked-root is a symbolic link"):
        storage.private_dir(str(link), "state")
    assert list(elsewhere.iterdir()) == []


def test_a_symlink_planted_among_the_working_copies_is_refused(tmp_path):
    from state.working import StateStoreError, private_store_dir
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    (root / "agg").symlink_to(elsewhere)
    with pytest.raises(StateStoreError, match="agg is a symbolic link"):
        private_store_dir(str(root), "agg", 0)
    assert list(elsewhere.iterdir()) == []

"""Shared helpers of the state tests (a uniquely named module: `conftest` is ambiguous)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# (provider name, changelog checkpointing)
CONFIGS = [("memory", True), ("rocksdb", True), ("rocksdb", False)]
IDS = ["memory", "rocksdb-changelog", "rocksdb-snapshots"]
# where the checkpoint lives: the local disk, or the moto S3 server (fixture s3_bucket)
STORAGES = ["local", "s3"]


def provider_conf(name: str, changelog: bool, local_dir: str, **conf) -> dict:
    conf = dict(conf, changelog_checkpointing=changelog)
    if name == "rocksdb":
        conf["local_dir"] = local_dir
    return conf


def checkpoint_url(request, tmp_path, storage: str) -> str:
    """A fresh checkpoint location: a local path, or a URL in a fresh S3 bucket."""
    if storage == "local":
        return str(tmp_path / "ckpt")
    return request.getfixturevalue("s3_bucket") + "/ckpt"


def store_names(ckpt: str, op: str = "op", part: int = 0) -> list[str]:
    """The object names of one store directory."""
    from increments import storage
    return [o.name for o in storage.location(ckpt).child("state", op, str(part)).list()]


def counting_location(inner, counts=None):
    """A real Location that records each request it sends to the store in ``.counts``
    (instrumentation around the real one, not a stand-in)."""
    from increments.storage import Location

    class CountingLocation(Location):
        def __init__(self, inner, counts):
            self.inner, self.counts = inner, counts
            self.url, self.is_local = inner.url, inner.is_local

        def child(self, *parts):
            return CountingLocation(self.inner.child(*parts), self.counts)

        def local_path(self, name=""):
            return self.inner.local_path(name)

    def counted(method):
        def call(self, *a, **kw):
            self.counts.append((method, a[0] if a else ""))
            return getattr(self.inner, method)(*a, **kw)
        return call

    for m in ("read_bytes", "write_bytes", "head", "list", "list_dir", "delete", "delete_prefix"):
        setattr(CountingLocation, m, counted(m))
    return CountingLocation(inner, counts if counts is not None else [])

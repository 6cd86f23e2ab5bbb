"""Where a query's files live: local paths and object-store URLs behind one small interface.

    loc = storage.location("s3://bucket/chk", storage_options={...})   # or a local path, file://...
    loc.write_bytes("metadata.json", b"...", create_only=True)         # FileExistsError if present
    loc.child("state", "0", "1").list(start_after="00000041")          # sorted, relative names

Schemes: plain paths and ``file://`` (the local disk, through the OS: fsync + atomic rename or
link, which give create-only and durable writes); ``s3://`` (``s3a://``), ``gs://`` (``gcs://``),
``az://`` / ``azure://`` / ``abfs://`` / ``abfss://`` through obstore (the Rust object_store crate
that delta-rs also uses; create-only puts are conditional puts: If-None-Match on S3). Any other
scheme raises UnknownSchemeError naming it.

Credentials and endpoints: each cloud's standard environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP, ...; GOOGLE_*; AZURE_*), overridden by
``storage_options`` (delta-rs' names: ``aws_access_key_id``, ``AWS_ENDPOINT_URL``, ``allow_http``, ...).
A secret never appears in a message: errors go through ``redact``.

Contract of every location (the checkpoint's protocol relies on it):
* ``write_bytes`` is all-or-nothing: a reader sees the old object, the new one, or none.
* ``create_only=True`` writes only if no object has that name; exactly one of two racing writers
  succeeds, the other gets FileExistsError. No rename and no lock is needed on object stores.
* ``list`` returns objects in key (byte) order; ``start_after`` asks the store only for the keys
  after it (S3's ListObjectsV2 StartAfter), so a prefix with many files is not listed in full.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import IncrementsError
from ..redaction import redact, redact_options, redact_url, remember_secrets  # noqa: F401 (re-exported)

LOCAL_SCHEMES = ("", "file")
REMOTE_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "azure": "az",
                  "abfs": "az", "abfss": "az"}
SUPPORTED = "local paths, file://, s3://, s3a://, gs://, az://, abfs://, abfss://"


class StorageError(IncrementsError):
    """An object-store call failed (the message names the location, never a secret)."""


class UnknownSchemeError(IncrementsError, ValueError):
    """A location's URL scheme is not one increments can store to."""


@dataclass(frozen=True)
class ObjectInfo:
    """One object: its name relative to the location it was listed from, size, mtime, etag."""
    name: str
    size: int
    mtime_ms: int
    etag: str | None = None


def scheme_of(url: str) -> str:
    """'' for a plain path; the lower-case scheme otherwise (a Windows drive letter is no scheme)."""
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", url)
    return m.group(1).lower() if m else ""


def is_remote(url: str) -> bool:
    return scheme_of(url) not in LOCAL_SCHEMES


def check_scheme(url: str, what: str = "location") -> str:
    """The scheme of `url`, or UnknownSchemeError naming it and the supported ones."""
    s = scheme_of(url)
    if s not in LOCAL_SCHEMES and s not in REMOTE_SCHEMES:
        raise UnknownSchemeError(f"{what} {redact_url(url)!r}: unknown scheme {s + '://'!r}; increments stores to "
                                 f"{SUPPORTED}")
    return s


def location(url: str, storage_options: dict[str, Any] | None = None) -> "Location":
    """The Location for a path or URL (see the module doc); unknown schemes are refused."""
    if isinstance(url, Location):
        return url
    url = os.fspath(url)
    s = check_scheme(url)
    if s in LOCAL_SCHEMES:
        from .local import LocalLocation  # noqa: PLC0415 - cycle: increments.storage.local -> increments.storage
        path = urlsplit(url).path if s == "file" else url
        return LocalLocation(os.path.abspath(path))
    from .remote import RemoteLocation  # noqa: PLC0415 - cycle: increments.storage.remote -> increments.storage
    return RemoteLocation.open(url, REMOTE_SCHEMES[s], dict(storage_options or {}))


class Location:
    """A directory-like place: objects are named by '/'-separated names relative to it."""

    url: str            # for messages and progress: no secrets (redacted)
    is_local: bool

    def child(self, *parts: str) -> "Location":
        raise NotImplementedError

    def read_bytes(self, name: str) -> bytes:
        """The object's content; FileNotFoundError when it does not exist."""
        raise NotImplementedError

    def write_bytes(self, name: str, data: bytes, *, create_only: bool = False) -> None:
        """Write the whole object atomically (see the module contract)."""
        raise NotImplementedError

    def head(self, name: str) -> ObjectInfo | None:
        raise NotImplementedError

    def list(self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None) -> list[ObjectInfo]:
        """Every object under `prefix` (a '/'-ended directory name or '' for all), recursively,
        in name order; with `start_after`, only names > it; with `limit`, at least the first `limit`
        of them (a store may return its whole last page). Names are relative to this location."""
        raise NotImplementedError

    def list_dir(self, prefix: str = "") -> tuple[list[ObjectInfo], list[str]]:
        """One level under `prefix`: (objects, sub-directory names), both relative to this location."""
        raise NotImplementedError

    def delete(self, name: str) -> None:
        """Delete one object (absent: nothing happens)."""
        raise NotImplementedError

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under `prefix` ('/'-ended directory name)."""
        for o in self.list(prefix):
            self.delete(o.name)

    def local_path(self, name: str = "") -> str | None:
        """The object's path on the local disk when this location is local, else None."""
        return None

    def fetch_local(self, name: str, cache_dir: str) -> str:
        """A local file holding the object: its own path when local, else a copy under `cache_dir`
        that the caller removes (the remote location streams it there)."""
        p = self.local_path(name)
        if p is None:
            raise NotImplementedError
        return p

    # -- conveniences --------------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        return self.head(name) is not None

    def read_json(self, name: str) -> Any:
        return json.loads(self.read_bytes(name))

    def write_json(self, name: str, body: Any, *, create_only: bool = False) -> None:
        self.write_bytes(name, json.dumps(body, sort_keys=True, indent=1).encode(), create_only=create_only)

    def join(self, *parts: str) -> str:
        """The display URL of a name under this location (for messages)."""
        tail = "/".join(p.strip("/") for p in parts if p)
        return self.url.rstrip("/") + ("/" + tail if tail else "")

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"Location({self.url!r})"

    def __fspath__(self) -> str:
        p = self.local_path("")
        if p is None:
            raise TypeError(f"{self.url} is on an object store, not a local path")
        return p


# -- secrets: increments/redaction.py (re-exported here; every message goes through it) ---------


# -- the local cache directory ---------------------------------------------------------------------
def private_dir(base: str | None = None, *parts: str) -> str:
    """A directory for local caches (RocksDB working copies, fetched files), private to this user.

    Root: `base`, else env INCREMENTS_LOCAL_DIR, else ``<system temp dir>/increments-<uid>`` (the
    temp dir honours TMPDIR). The root is created 0700; one that is owned by another user or that
    others can write to is refused (another local user could otherwise plant or swap the caches).
    """
    root = base or os.environ.get("INCREMENTS_LOCAL_DIR") or os.path.join(
        tempfile.gettempdir(), f"increments-{os.getuid()}")
    root = os.path.abspath(root)
    _refuse_link(root, root)
    os.makedirs(root, mode=0o700, exist_ok=True)
    st = os.stat(root)
    if st.st_uid != os.getuid():
        raise StorageError(f"the local cache directory {root} belongs to user id {st.st_uid}, not to this user "
                           f"({os.getuid()}); increments refuses to use caches another user could change. Remove "
                           "it, or point INCREMENTS_LOCAL_DIR (or the local_dir option) at a directory of yours.")
    if st.st_mode & 0o022:
        raise StorageError(f"the local cache directory {root} can be written by other users (mode "
                           f"{st.st_mode & 0o777:o}); increments refuses to use it. chmod 700 it, or point "
                           "INCREMENTS_LOCAL_DIR (or the local_dir option) elsewhere.")
    path = root
    for part in parts:        # each directory below the root too: a planted link would redirect the caches
        path = os.path.join(path, part)
        _refuse_link(path, root)
        os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _refuse_link(path: str, root: str) -> None:
    """StorageError when `path` (the cache root or a directory below it) is a symbolic link: whoever
    planted it would choose where increments writes and reads its caches."""
    if os.path.islink(path):
        raise StorageError(
            f"the local cache directory {path} is a symbolic link (to {os.readlink(path)}); increments refuses to "
            f"follow it (whoever planted it would choose where the caches are written and read). Remove it"
            + (f" (the cache root is {root})" if path != root else "")
            + ", or point INCREMENTS_LOCAL_DIR (or the local_dir option) at a real directory of yours.")


__all__ = ["Location", "ObjectInfo", "StorageError", "UnknownSchemeError", "location", "scheme_of", "is_remote",
           "check_scheme", "redact", "redact_url", "redact_options", "remember_secrets", "private_dir"]

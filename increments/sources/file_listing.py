"""Names and local copies for the file source (files.py): which listed names are the source's
files, and local files holding objects for the readers."""
from __future__ import annotations

import fnmatch
import os
import tempfile
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

from .. import storage
from ..storage import Location, ObjectInfo

_WILDCARDS = "*?["


def split_glob(path: str) -> tuple[str, str | None]:
    """(the directory to list, the pattern of names relative to it or None for a directory)."""
    idx = min((path.find(c) for c in _WILDCARDS if c in path), default=-1)
    if idx < 0:
        root = path.rstrip("/") or "/"
        return (root if storage.is_remote(path) or storage.scheme_of(path) else os.path.abspath(root)), None
    cut = path.rfind("/", 0, idx)
    scheme = storage.scheme_of(path)
    if scheme:
        head = len(scheme) + 3
        if path.find("/", head) < 0 or cut < path.find("/", head):
            raise ValueError(f"files({storage.redact_url(path)!r}): a wildcard in the bucket or container name "
                             "is not supported; put wildcards in the path after it")
        return path[:cut], path[cut + 1:]
    if cut < 0:
        return os.path.abspath("."), path
    return os.path.abspath(path[:cut] or "/"), path[cut + 1:]


def _hidden(segment: str) -> bool:
    return segment.startswith((".", "_"))


def name_matches(name: str, pattern: str | None) -> bool:
    """Is `name` (relative to the listed directory) one of the source's files? No segment may start
    with '.' or '_'; without a pattern only the directory's own files (no '/'), with one each
    segment matches the pattern's segment ('*' never crosses a '/')."""
    segs = name.split("/")
    if any(_hidden(s) for s in segs):
        return False
    if pattern is None:
        return len(segs) == 1
    pats = pattern.split("/")
    return len(segs) == len(pats) and all(fnmatch.fnmatchcase(s, p) for s, p in zip(segs, pats))


class LocalCopy:
    """A local path holding the object: the file itself when local, else a private copy that is
    deleted on exit (FileNotFoundError when the object is gone)."""

    def __init__(self, loc: Location, name: str, local_dir: str | None = None):
        self.loc, self.name, self.tmp, self.local_dir = loc, name, None, local_dir

    def __enter__(self) -> str:
        p = self.loc.local_path(self.name)
        if p is not None:
            return p
        self.tmp = self.loc.fetch_local(self.name, storage.private_dir(self.local_dir, "fetch"))
        return self.tmp

    def __exit__(self, *exc: Any) -> None:
        if self.tmp is not None:
            try:
                os.remove(self.tmp)
            except FileNotFoundError:
                pass


@contextmanager
def concatenated(keys: list[str], content: Callable[[str], bytes], threads: int = 1,
                 local_dir: str | None = None) -> Iterator[str]:
    """A private local file holding the contents of `keys` in order, each ended by a newline
    (JSON lines stay JSON lines); deleted on exit. `content` raises FileNotFoundError for a gone file."""
    fd, tmp = tempfile.mkstemp(dir=storage.private_dir(local_dir, "fetch"), prefix="batch-", suffix=".json")
    try:
        with os.fdopen(fd, "wb") as out, ThreadPoolExecutor(threads) as pool:
            for data in pool.map(content, keys):
                out.write(data)
                if data and not data.endswith(b"\n"):
                    out.write(b"\n")
        yield tmp
    finally:
        os.remove(tmp)


def within_bytes(files: list[ObjectInfo], budget: int) -> list[ObjectInfo]:
    """The leading files whose sizes (as listed) add up to at most `budget` bytes."""
    out, total = [], 0
    for f in files:
        total += f.size
        if total > budget:
            break
        out.append(f)
    return out

"""The file source's seen-files log: ``<checkpoint>/sources/<i>/<n>.json`` holds the files of entry n.

The source's offset is the number of the last entry a batch includes (-1 = none). Entry n is
``{"version": 2, "files": [{"name", "size", "mtime_ms", "etag"}, ...], "last": <last name>}``:
the files (names relative to the source's root, in name order, with what the listing said about
them) and the last name, from which the next entry's listing starts (name order, see files.py).
Entries of version 1 (a list of absolute local paths, no "last") are still read.

Recovery rule (zombie safety, CONTRACT 6): entry n is written create-only in the plan step,
before offsets[N]. A plan that finds entry n already there adopts it and never overwrites it: it
can only be the orphan of a plan that crashed before writing offsets[N] (no batch referenced it,
so adopting it loses nothing: its files are still after entry n-1's last name), or the entry of a
concurrent runner that may win the fence (the winner's entry must stay what it wrote). Once
written an entry never changes, so it is cached.
"""
from __future__ import annotations

import json
import os
from typing import Any

from ..storage import Location, ObjectInfo


class SeenFilesLog:
    def __init__(self, loc: Location):
        self.loc = loc
        self._entries: dict[int, dict] = {}
        #: entries this log created (not adopted) for which no read record (<n>.read.json) was
        #: written since: none can exist (file_changes.py skips removing one)
        self.no_read_record: set[int] = set()

    def _name(self, n: int) -> str:
        return f"{n}.json"

    def entry(self, n: int) -> dict:
        """Entry n (cached; FileNotFoundError naming it when it does not exist)."""
        e = self._entries.get(n)
        if e is None:
            try:
                e = json.loads(self.loc.read_bytes(self._name(n)))
            except FileNotFoundError:
                raise FileNotFoundError(f"seen-files entry {self.loc.join(self._name(n))} does not exist") from None
            self._entries[n] = e
        return e

    def files(self, n: int) -> list[Any]:
        """Entry n's files: dicts (version 2) or absolute local paths (version 1)."""
        return list(self.entry(n)["files"])

    def files_between(self, start: int, end: int) -> list[Any]:
        out: list[Any] = []
        for k in range(start + 1, end + 1):
            out.extend(self.files(k))
        return out

    def last(self, n: int, rel: Any = None) -> str | None:
        """The last name of entries 0..n (None for n = -1). `rel` turns a version-1 entry's
        absolute path into a name relative to the source's root."""
        if n < 0:
            return None
        e = self.entry(n)
        if e.get("last") is not None:
            return e["last"]
        names = [rel(f) if rel else f for f in e["files"]]
        return max(names, key=lambda p: (os.path.basename(p), p)) if names else None

    def write(self, n: int, files: list[ObjectInfo]) -> dict:
        """Create entry n with `files`, or adopt the entry n that exists (module doc); the entry."""
        body = {"version": 2, "last": files[-1].name,
                "files": [{"name": f.name, "size": f.size, "mtime_ms": f.mtime_ms, "etag": f.etag} for f in files]}
        try:
            self.loc.write_bytes(self._name(n), json.dumps(body, indent=1).encode(), create_only=True)
        except FileExistsError:
            self._entries.pop(n, None)
            return self.entry(n)
        self._entries[n] = body
        self.no_read_record.add(n)
        return body

    def newest(self) -> int:
        """The highest entry number written (-1: none); orphans included."""
        objs, _ = self.loc.list_dir("")
        nums = [int(o.name[:-5]) for o in objs if o.name.endswith(".json") and o.name[:-5].isdigit()]
        return max(nums, default=-1)


def entry_key(f: Any) -> str:
    """The key of one file of an entry: its name relative to the root (a version-2 record), or
    the absolute path a version-1 entry lists."""
    return f["name"] if isinstance(f, dict) else f

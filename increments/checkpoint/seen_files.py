"""The file source's seen-files log: <checkpoint>/sources/<i>/<n>.json lists the files of entry n.

The source's offset is the number of the last entry a batch includes (-1 = none). An entry is
written in the plan step before offsets[N]; an entry beyond the latest planned offset was never
referenced by the batch log (the plan crashed before offsets[N]) and is simply overwritten, so no
file counts as seen unless a batch that is committed or will be redone includes it.
"""
from __future__ import annotations

import os

from .metadata import atomic_write_json, read_json


class SeenFilesLog:
    def __init__(self, directory: str):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self._seen: set[str] = set()
        self._upto = -1

    def _path(self, n: int) -> str:
        return os.path.join(self.directory, f"{n}.json")

    def files(self, n: int) -> list[str]:
        p = self._path(n)
        if not os.path.exists(p):
            raise FileNotFoundError(p)
        return read_json(p)["files"]

    def files_between(self, start: int, end: int) -> list[str]:
        out: list[str] = []
        for n in range(start + 1, end + 1):
            out.extend(self.files(n))
        return out

    def seen_upto(self, upto: int) -> set[str]:
        """Every file of entries 0..upto (cached, extended incrementally)."""
        if upto < self._upto:
            self._seen, self._upto = set(), -1
        for n in range(self._upto + 1, upto + 1):
            self._seen.update(self.files(n))
        self._upto = upto
        return self._seen

    def write(self, n: int, files: list[str]) -> None:
        atomic_write_json(self._path(n), {"version": 1, "files": files})

"""The file source's check of every file it read, in the plan step (issue 28 item 1).

Each file is read once (the name-order rule), so a file that grows or is rewritten after its batch
read it holds rows no batch will ever read. The read step checks the files of the batch before
(sources/file_changes.py); this module checks the last `changed_files_window` files read (default
10,000; 0: only the previous batch's) at every plan, also when no new file arrived (the plan of
an idle trigger), so a change seen after several later batches, or to the only file, is caught:

    window = facts (size, mtime ms | size, etag) of the last W files read, as their entries
             recorded them (amended by sources/<i>/<n>.read.json where a read found a file
             changed since listed), kept in memory and extended by each new entry
    checked at each plan: the last RECENT (1,000) files read, and a slice of SLICE (1,000) of the
             older files of the window that moves on at each plan, so every file of the window
             is checked at least once every ceil((W - 1,000) / 1,000) plans (9 at the default
             window) at a fixed cost per plan, whatever W: on an object store one listing from
             just before the recent files (StartAfter; the plan reuses its part after the last
             name read as its listing of new files) and one page of 1,000 keys at the slice,
             on the local disk a stat of each file checked, by name
    a file whose size (or, on an object store, etag) differs -> DataLossError naming the file and
             the batch that read it; with fail_on_data_loss=False a warning, once per change, the
             file counted in the next batch's read metrics (changed_files), and its new facts the
             baseline from then on; a file gone, or only touched (same size, new mtime), is no loss

A fresh process (a Dagster run: one per batch) starts its slice where a process that planned every
batch would have it (entry number x SLICE), so successive runs move it on as one process does; a
trigger sensor's tick (the same check, side-effect free, when there is no new data:
file_changes.changed_since_read) starts it at a random place, as its ticks do not move the entry
number on. A fresh process does not read W entries back: at every commit
whose entry number is a multiple of INDEX_EVERY the window is written to
sources/<i>/window/<n>.json (create-only; its content is a function of committed entries), and a
plan loads the newest such index at or below its start entry plus the entries after it.
"""
from __future__ import annotations

import json
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..redaction import logger as redacting_logger
from .file_changes import _as_read, _listed, report_change
from .file_listing import name_matches


log = redacting_logger("increments.sources.files")
DEFAULT_WINDOW = 10_000
#: the most recently read files, checked at every plan
RECENT = 1000
#: ...and this many of the older files of the window, a slice that moves on at each plan
SLICE = 1000
#: a window index every this many entries (a fresh process reads at most this many entries more)
INDEX_EVERY = 32


class ReadFilesWindow:
    """The facts of the last `size` files read (module doc) for one FileSource."""

    def __init__(self, src: Any, size: int, cursor: int | None = None):
        self.src, self.size = src, int(size)
        self.facts: OrderedDict[str, tuple] = OrderedDict()   # name -> facts, oldest entry first
        self.entry_of: dict[str, int] = {}
        self.upto: int | None = None            # the last entry folded in
        self.reported: dict[str, tuple] = {}    # name -> facts warned about (fail_on_data_loss=False)
        self.pending: list[str] = []            # changed files for the next batch's read metrics
        #: where among the older files the next plan's slice starts (None: at the first plan, from
        #: its entry number, as if this process had planned every batch)
        self.cursor = cursor

    # -- the window ---------------------------------------------------------------------------
    def _facts_of(self, n: int) -> dict[str, tuple]:
        got = _listed(self.src, n)
        got.update({k: v for k, v in _as_read(self.src, n).items() if k in got})
        return got

    def _fold(self, n: int, facts: dict[str, tuple]) -> None:
        for name, f in facts.items():
            self.facts.pop(name, None)
            self.facts[name] = tuple(f)
            self.entry_of[name] = n
        while len(self.facts) > self.size:
            name, _ = self.facts.popitem(last=False)
            self.entry_of.pop(name, None)
        self.upto = n

    def advance(self, start: int) -> None:
        """Fold in entries up to `start` (the last entry a committed batch read)."""
        if start < 0 or self.size <= 0 or (self.upto is not None and self.upto >= start):
            return
        first = self.upto + 1 if self.upto is not None else self._load_index(start)
        todo = list(range(first, start + 1))
        if len(todo) == 1:                  # the usual plan: one entry, no pool to start and join
            self._fold(todo[0], self._facts_of(todo[0]))
            return
        with ThreadPoolExecutor(min(8, max(1, len(todo)))) as pool:
            for n, facts in zip(todo, pool.map(self._facts_of, todo)):
                self._fold(n, facts)

    def _load_index(self, start: int) -> int:
        """Load the newest window index at or below `start`; the first entry still to fold in."""
        k = start - start % INDEX_EVERY
        for _ in range(3):
            if k < 0:
                break
            try:
                body = self.src.own_files().read_json(f"window/{k}.json")
            except (FileNotFoundError, ValueError, KeyError):
                k -= INDEX_EVERY
                continue
            names = body["names"]
            self.facts = OrderedDict(zip(names, zip(body["f0"], body["f1"])))
            self.entry_of = dict(zip(names, body["entries"]))
            self.upto = k
            return k + 1
        # no index: the entries back from `start` until the window is full
        n, got = start, []
        while n >= 0 and sum(len(g) for _, g in got) < self.size:
            got.append((n, self._facts_of(n)))
            n -= 1
        for m, facts in reversed(got):
            self._fold(m, facts)
        return start + 1

    def write_index(self, end: int) -> None:
        """After commits[N] whose entry `end` is a multiple of INDEX_EVERY: the window as of `end`."""
        if self.size <= 0 or end <= 0 or end % INDEX_EVERY:
            return
        self.advance(end)
        if self.upto != end:
            return
        names = list(self.facts)       # columns: a fresh process parses and zips them back fast
        body = {"names": names, "entries": [self.entry_of[n] for n in names],
                "f0": [f[0] for f in self.facts.values()], "f1": [f[1] for f in self.facts.values()]}
        try:
            self.src.own_files().write_bytes(f"window/{end}.json", json.dumps(body).encode(), create_only=True)
        except FileExistsError:
            pass
        stale = end - 4 * INDEX_EVERY
        if stale >= 0:
            self.src.own_files().delete(f"window/{stale}.json")

    # -- the check ----------------------------------------------------------------------------
    def check(self, start: int, last: str | None, report: Any = report_change) -> list[Any] | None:
        """Check the window at a plan from entry `start` (module doc). Returns the listing of the
        names after `last` it made (the plan's new files), or None when it listed nothing.
        `report(src, name, was, got, when)` is told of each change (default report_change: raise
        or warn); True: a change it counted."""
        if self.cursor is None:
            # a fresh process (every Dagster run) starts its slice of the older files where a
            # process that planned every batch would be, so successive runs move it on
            self.cursor = max(start, 0) * SLICE
        self.advance(start)
        if not self.facts:
            return None
        src = self.src
        root = src.root()
        names = list(self.facts)
        recent, older = names[-RECENT:], names[:-RECENT]
        part: list[str] = []
        if older:
            c = self.cursor % len(older)
            part = older[c:c + SLICE]
        if root.local_path("") is not None:     # local: a stat of each file checked, by name
            listed = None
            now = _stat_all(root.local_path(""), part + recent)
            self.cursor = (self.cursor % max(1, len(older))) + len(part)
        else:                                   # an object store: one listing from the recent files on,
            listed = root.list("", start_after=_just_before(recent[0]))         # new files included
            now = {o.name: (o.size, o.etag) for o in listed}
            if part:                            # and one page at the rotating position among the older
                page = root.list("", start_after=_just_before(part[0]), limit=len(part))
                now.update({o.name: (o.size, o.etag) for o in page})
                seen = page[-1].name if page else part[0]
                done = [n for n in part if n <= seen]
                part = done
                self.cursor = (self.cursor % max(1, len(older))) + max(1, len(done))
        for name in part + recent:
            was = self.facts.get(name)
            got = now.get(name)
            if got is None or got == was or self.reported.get(name) == got:
                continue
            n = self.entry_of.get(name, start)
            when = ("the previous batch read it" if n == start else
                    f"the batch of seen-files entry {n} read it ({start - n} batches before the previous one)")
            if report(src, name, was, got, when):       # raises unless fail_on_data_loss=False
                self.reported[name] = got
                self.pending.append(src.display(name))
            self.facts[name] = got              # the baseline from now on (also a file only touched)
        if listed is None:
            return None                         # the plan lists the names after the last one itself
        return [o for o in listed if (last is None or o.name > last) and name_matches(o.name, src.pattern)]

    def accepted(self, name: str, facts: tuple) -> bool:
        """Was this change of `name` already reported (the read step's check then skips it)?"""
        return self.reported.get(name) == tuple(facts)

    def take_pending(self) -> list[str]:
        out, self.pending = self.pending, []
        return out


def _stat_all(base: str, names: Any) -> dict[str, tuple]:
    """(size, mtime ms) of each name under the local directory `base` (a gone file is left out)."""
    out: dict[str, tuple] = {}
    stat, sep = os.stat, os.sep
    prefix = base.rstrip(sep) + sep
    for name in names:
        try:
            st = stat(prefix + name)
        except OSError:
            continue
        out[name] = (st.st_size, st.st_mtime_ns // 1_000_000)
    return out


def _just_before(name: str) -> str | None:
    """A key that sorts right before `name` (listing after it includes `name`), or None."""
    if not name:
        return None
    last = name[-1]
    return name[:-1] + chr(ord(last) - 1) if ord(last) > 0 else name[:-1] or None

"""The file source's check for files that changed after a batch read them (FileSource.read).

Each file is read once (the name-order rule), so a file that grows or is rewritten after its batch
read it holds rows no batch will read: the next batch fails naming it (DataLossError), or with
fail_on_data_loss=False goes on and reports it. What a file was when read: the size and mtime (an
object's size and etag) its seen-files entry recorded, or, when a read found the file changed
since it was listed (a file fixed after a failed batch), what that read saw
(sources/<i>/<n>.read.json).
"""
from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor

from ..errors import DataLossError
from ..redaction import logger as redacting_logger

log = redacting_logger("increments.sources.files")
#: up to this many files of the batch before and this one are checked with one HEAD each; more with
#: one listing from the entry before them
HEAD_AT_MOST = 64


def _listed(src, n: int) -> dict[str, tuple]:
    """What entry n's listing said of its files: (size, mtime ms) locally, (size, etag) of an object."""
    local = src.root().is_local
    return {f["name"]: ((f["size"], f["mtime_ms"]) if local else (f["size"], f["etag"]))
            for f in src._log.files(n) if isinstance(f, dict)}


def _as_read(src, n: int) -> dict[str, tuple]:
    """The facts of entry n's files that its read found changed since listed: what this runtime's
    read recorded (no request), else sources/<i>/<n>.read.json (one GET, after a restart)."""
    known = src._read_facts.get(n)
    if known is not None:
        return known
    try:
        return {k: tuple(v) for k, v in src.own_files().read_json(f"{n}.read.json").items()}
    except FileNotFoundError:
        return {}


def file_facts(src, entries: list[int], names: list[str]) -> dict[str, tuple | None]:
    """The facts now of `names` (files of `entries`): a local file's (size, mtime ms) by stat
    (None: gone), an object's (size, etag) by HEAD (up to HEAD_AT_MOST files) or one listing after
    the entry before the first."""
    if not names:
        return {}
    if src.root().is_local:
        now: dict[str, tuple | None] = {}
        for name in names:
            try:
                st = os.stat(src.root().local_path(name))
                now[name] = (st.st_size, int(st.st_mtime_ns // 1_000_000))
            except OSError:
                now[name] = None
        return now
    if len(names) <= HEAD_AT_MOST:       # a few files (a rate-limited batch): one HEAD each, in parallel
        with ThreadPoolExecutor(min(8, len(names))) as pool:
            infos = list(pool.map(src.root().head, names))
        return {n: (None if i is None else (i.size, i.etag)) for n, i in zip(names, infos)}
    # many files (the batch took the whole backlog): one listing from the entry before
    want = set(names)
    listed = {o.name: (o.size, o.etag) for o in src.root().list("", start_after=src._log.last(entries[0] - 1, src._rel))
              if o.name in want}
    return {name: listed.get(name) for name in names}


def check_unchanged(src, start: int, end: int) -> list[str]:
    """Before reading entries (start, end]: the files of entry `start` (the batch before read them)
    must be as they were read: a file that grew or was rewritten since holds rows no batch will
    read (each file is read once). DataLossError naming the file, or with fail_on_data_loss=False
    a warning (returns the changed files). A local file counts as changed when its size changed
    (a new mtime alone is logged, not refused), an object when its size or etag did.

    This batch's files that changed since they were listed (a file fixed after a failed batch) are
    read as they are now, and those facts are recorded in sources/<i>/<n>.read.json, so the next
    batch compares with what was read. The record is always relative to the listing (never to an
    earlier attempt's record), and rewritten by every attempt that reads the entry: an attempt
    that finds every file as listed removes a record an earlier attempt left (a file restored to
    what was listed), unless this runtime itself created entry n in its plan and wrote no record
    for it (then there is none to remove: no request)."""
    if src._log is None:
        return []
    prev = _listed(src, start) if start >= 0 else {}
    if prev:
        prev.update(_as_read(src, start))
    current = {n: _listed(src, n) for n in range(start + 1, end + 1)}
    names = list(prev) + [name for files in current.values() for name in files if name not in prev]
    now = file_facts(src, list(range(max(start, 0), end + 1)), names)
    for n, listed in current.items():
        amended = {k: now[k] for k in listed if now.get(k) is not None and now[k] != listed[k]}
        if amended:
            src.own_files().write_json(f"{n}.read.json", amended)
            src._log.no_read_record.discard(n)
        elif n not in src._log.no_read_record:
            src.own_files().delete(f"{n}.read.json")
            src._log.no_read_record.add(n)
        src._read_facts[n] = amended      # the next batch of this runtime compares with it, no GET
    want = prev
    changed = []
    for name in sorted(prev):
        facts, got = want.get(name), now.get(name)
        if got is None or got == facts:
            continue            # gone after it was read: nothing unread is lost
        if src._window is not None and src._window.accepted(name, got):
            continue            # the plan's window check reported it already (fail_on_data_loss=False)
        if report_change(src, name, facts, got):
            changed.append(src.display(name))
    return changed


def report_change(src, name: str, was: tuple, got: tuple, when: str = "the previous batch read it") -> bool:
    """File `name`, read when its facts were `was`, now has `got`: False when that is no change (a
    local file with the same size and a new mtime: touched, or rewritten with the same bytes as
    tests and copy tools do; logged); else DataLossError naming the file and `when`, or with
    fail_on_data_loss=False a warning and True (the caller counts and reports it)."""
    if got[0] == was[0] and src.root().is_local:
        log.info("%s", src.fail(f"file {src.display(name)} has a new modification time but its size is "
                                 "unchanged since it was read; assuming the same content"))
        return False
    what = f"size {was[0]} -> {got[0]} bytes" if got[0] != was[0] else "rewritten in place: same size, new etag"
    msg = (f"file {src.display(name)} changed after {when} ({what}): the rows written to it since were not read "
           "and never will be (each file is read once). Files must be complete when they land: write each file "
           "elsewhere (or under a name starting with '.' or '_', which the source ignores) and rename it into "
           "place (or upload it in one put) when it is complete.")
    if src.fail_on_data_loss:
        raise DataLossError(src.fail(msg + " Put the new rows in a new file and restore this one, or set "
                                            "fail_on_data_loss=False to go on without them (logged and reported)."))
    log.warning("%s", src.fail(msg + " Going on (fail_on_data_loss=False)."))
    return True


def changed_since_read(src, end: int) -> list[tuple[bool, str]]:
    """Files read by the batches up to seen-files entry `end` that changed since, side-effect free
    (Source.changed_since_read, for the Dagster trigger sensor when there is no new data): the
    check the next plan makes (the read-files window, read_files_window.py), in a throw-away window,
    with nothing logged, raised or written: (the next plan fails on it, message naming the file and
    the batch that read it) per changed file. With changed_files_window=0 the plan checks nothing
    (the next batch's read step checks the previous batch's files): those files are checked here,
    reported as not failing a plan, so that the sensor names them without requesting a run that
    would find nothing to do."""
    if src._log is None or end is None or end < 0:
        return []
    from .read_files_window import ReadFilesWindow  # noqa: PLC0415 - cycle: read_files_window imports this module
    found: list[tuple[bool, str]] = []
    plan_fails = src.fail_on_data_loss and src.changed_files_window > 0
    if src.fail_on_data_loss:
        note = "" if plan_fails else (" (changed_files_window=0: no plan checks it, the next batch's read step "
                                      "fails on it)")
    else:
        note = " (fail_on_data_loss=False: going on, its new rows are not read)"

    def collect(src_, name, was, got, when):
        if got[0] == was[0] and src_.root().is_local:
            return False                # only touched: no change (report_change logs it)
        what = f"size {was[0]} -> {got[0]} bytes" if got[0] != was[0] else "rewritten in place: same size, new etag"
        found.append((plan_fails, f"file {src_.display(name)} changed after {when} ({what}){note}"))
        return True
    if src.changed_files_window > 0:
        # each tick checks another slice of the older files (read_files_window.py)
        window = ReadFilesWindow(src, src.changed_files_window, cursor=random.randrange(src.changed_files_window))
        window.check(end, src._log.last(end, src._rel), report=collect)
        return found
    was = _listed(src, end)
    was.update({k: v for k, v in _as_read(src, end).items() if k in was})
    now = file_facts(src, [end], list(was))
    for name in sorted(was):
        if now.get(name) is not None and now[name] != was[name]:
            collect(src, name, was[name], now[name], "the previous batch read it")
    return found

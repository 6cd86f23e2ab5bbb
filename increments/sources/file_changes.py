"""The file source's check for files that changed after a batch read them (FileSource.read).

Each file is read once (the name-order rule), so a file that grows or is rewritten after its batch
read it holds rows no batch will read: the next batch fails naming it (DataLossError), or with
fail_on_data_loss=False goes on and reports it. What a file was when read: the size and mtime (an
object's size and etag) its seen-files entry recorded, or, when a read found the file changed
since it was listed (a file fixed after a failed batch), what that read saw
(sources/<i>/<n>.read.json).
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor

from ..errors import DataLossError

log = logging.getLogger("increments.sources.files")
#: up to this many files of the batch before and this one are checked with one HEAD each; more with
#: one listing from the entry before them
HEAD_AT_MOST = 64


def file_facts(src, entries: list[int]) -> tuple[dict[str, tuple], dict[str, tuple | None]]:
    """(the facts entries' files had when listed or, when a read found them changed since, when
    read; their facts now): a local file's (size, mtime ms) by stat, an object's (size, etag) by
    HEAD (up to HEAD_AT_MOST files) or one listing after the entry before the first. Files of
    version-1 entries are left out."""
    assert src._log is not None
    files = [f for n in entries for f in src._log.files(n) if isinstance(f, dict)]
    local = src.root().is_local
    want = {f["name"]: ((f["size"], f["mtime_ms"]) if local else (f["size"], f["etag"])) for f in files}
    for n in entries:
        known = src._read_facts.get(n)       # what this runtime's read of entry n recorded (no GET)
        if known is not None:
            want.update(known)
            continue
        try:
            want.update({k: tuple(v) for k, v in src.own_files().read_json(f"{n}.read.json").items()})
        except FileNotFoundError:
            pass
    if not want:
        return {}, {}
    if local:
        now: dict[str, tuple | None] = {}
        for name in want:
            try:
                st = os.stat(src.root().local_path(name))
                now[name] = (st.st_size, int(st.st_mtime_ns // 1_000_000))
            except OSError:
                now[name] = None
        return want, now
    if len(want) <= HEAD_AT_MOST:       # a few files (a rate-limited batch): one HEAD each, in parallel
        names = list(want)
        with ThreadPoolExecutor(min(8, len(names))) as pool:
            infos = list(pool.map(src.root().head, names))
        return want, {n: (None if i is None else (i.size, i.etag)) for n, i in zip(names, infos)}
    # many files (the batch took the whole backlog): one listing from the entry before
    listed = {o.name: (o.size, o.etag) for o in src.root().list("", start_after=src._log.last(entries[0] - 1, src._rel))
              if o.name in want}
    return want, {name: listed.get(name) for name in want}


def check_unchanged(src, start: int, end: int) -> list[str]:
    """Before reading entries (start, end]: the files of entry `start` (the batch before read them)
    must be as they were read: a file that grew or was rewritten since holds rows no batch will
    read (each file is read once). DataLossError naming the file, or with fail_on_data_loss=False
    a warning (returns the changed files). A local file counts as changed when its size changed
    (a new mtime alone is logged, not refused), an object when its size or etag did. This batch's
    files that changed since they were listed (a file fixed after a failed batch) are read as they
    are now, and their facts recorded in sources/<i>/<n>.read.json, so the next batch compares
    with what was read."""
    if src._log is None:
        return []
    want, now = file_facts(src, list(range(max(start, 0), end + 1)))
    prev = {f["name"] for f in src._log.files(start) if isinstance(f, dict)} if start >= 0 else set()
    for n in range(start + 1, end + 1):
        amended = {f["name"]: now[f["name"]] for f in src._log.files(n) if isinstance(f, dict)
                   and now.get(f["name"]) is not None and now[f["name"]] != want.get(f["name"])}
        if amended:
            src.own_files().write_json(f"{n}.read.json", amended)
        src._read_facts[n] = amended      # the next batch of this runtime compares with it, no GET
    changed = []
    for name in sorted(prev):
        facts, got = want.get(name), now.get(name)
        if got is None or got == facts:
            continue            # gone after it was read: nothing unread is lost
        if got[0] == facts[0] and src.root().is_local:
            # same size, new modification time: touched, or rewritten with the same bytes (as
            # tests and copy tools do); not counted as a change (a local file has no etag)
            log.info("%s", src.fail(f"file {src.display(name)} has a new modification time but its size is "
                                     "unchanged since it was read; assuming the same content"))
            continue
        what = (f"size {facts[0]} -> {got[0]} bytes" if got[0] != facts[0]
                else "rewritten in place: same size, new etag")
        msg = (f"file {src.display(name)} changed after the previous batch read it ({what}): the rows written "
               "to it since were not read and never will be (each file is read once). Files must be complete "
               "when they land: write each file elsewhere (or under a name starting with '.' or '_', which "
               "the source ignores) and rename it into place (or upload it in one put) when it is complete.")
        if src.fail_on_data_loss:
            raise DataLossError(src.fail(msg + " Put the new rows in a new file and restore this one, or set "
                                                "fail_on_data_loss=False to go on without them (logged and reported)."))
        log.warning("%s", src.fail(msg + " Going on (fail_on_data_loss=False)."))
        changed.append(src.display(name))
    return changed

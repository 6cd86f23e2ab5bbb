"""The checkpoint files of a state store, on any ``increments.storage.Location``.

Per store: ``checkpoint.child("state", <operator>, <partition>)`` holds

* ``<v>.<token>.delta`` (memory) / ``<v>.<token>.changelog`` (rocksdb): the puts and deletes of the
  attempt ``token`` that built version v, an Arrow IPC file with columns key (binary) and value
  (binary, null = delete). Its schema metadata ``increments`` is JSON
  ``{"version", "token", "parent", "rows"}``: ``parent`` is the token of version v-1 this version was
  built on ("" for v = 0), ``rows`` the exact row count after v.
* ``<v>.<token>.snapshot``: a full copy of version v of attempt ``token`` (memory: one Arrow IPC
  object with the same metadata; rocksdb: a prefix ``<v>.<token>.snapshot/`` holding the files of a
  RocksDB checkpoint, or for a small version one ``rows.arrow`` in the changelog's encoding, then
  ``_meta.json`` with the same fields (plus ``"format": "rows"`` for the latter), written last: a
  prefix without it is incomplete and ignored).

Every object is written once, create-only (``put``), under a name no other attempt uses (the token
is a fresh uuid per commit attempt, then ``-<rows>``: see new_token), so two attempts of one batch (a redo, or a zombie that lost the fence)
never overwrite each other: each version has one file set per token, and the commit log names the
authoritative token. Loading (v, token) follows ``parent`` tokens back to a complete snapshot on
that lineage (or to version -1, empty), then replays forward (``trace``).

Checkpoints of earlier releases named files ``<v>.delta`` / ``<v>.changelog`` / ``<v>.snapshot``
without a token and recorded no parent: they read as token "" with parent "", a lineage of their
own that new versions (parent "") continue.
"""
from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field

from increments.lazy import lazy_module
from increments.storage import location

from .base import StateStoreError

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py

_NAME = re.compile(r"^(\d+)(?:\.([0-9A-Za-z_-]+))?\.(delta|changelog|snapshot)(?:/(.+))?$")
META = "_meta.json"


def new_token(rows: int | None = None) -> str:
    """A fresh attempt token: 32 hex digits, then ``-<rows>`` (the version's row count) when given.
    Carrying the rows in the token lets the commit log, which records the token, vouch for them: a
    working copy is checked against them without a request to the store."""
    return uuid.uuid4().hex + ("" if rows is None else f"-{int(rows)}")


_TOKEN_ROWS = re.compile(r"^[0-9a-f]{32}-(\d+)$")


def token_rows(token: str | None) -> int | None:
    """The row count a token of ``new_token(rows)`` (or one derived from it) carries; None for
    other tokens."""
    m = _TOKEN_ROWS.match(split_token(token or "")[0])
    return int(m.group(1)) if m else None


# -- unchanged versions: no file, a token derived from the parent's ----------------------------------
# A commit with no changes (a partition the batch did not touch) writes nothing: its token is
# ``<base>~<k>``, meaning "the content of version v-k of attempt <base>" (a version with files),
# k = 1, 2, ... for consecutive unchanged versions. The commit log records that token like any
# other, so the version is as durable as its base, which was durable before. Derived tokens never
# name a file; loading follows them to the base (``trace``). A version due for a snapshot is
# always written, so a chain of derived versions never spans a snapshot (retention stays sound).
_DERIVED = "~"


def split_token(token: str) -> tuple[str, int]:
    """(base token, k) of ``<base>~<k>``; (token, 0) for a token that names files."""
    base, sep, k = token.rpartition(_DERIVED)
    return (base, int(k)) if sep and k.isdigit() else (token, 0)


def derived_token(parent: str) -> str:
    """The token of an unchanged version on top of ``parent`` (see above)."""
    base, k = split_token(parent)
    return f"{base}{_DERIVED}{k + 1}"


def put(loc, name: str, data: bytes, *, more: bool = False) -> None:
    """The one write primitive of the state store: create-only (FileExistsError when taken).
    A module function so that the crash tests can stop a process right before or after it.
    ``more``: the caller puts another file into the same directory next, whose durability implies
    this one's (a snapshot's data before its ``_meta.json``): on the local disk this file's content
    is fsynced but not its directory entry, which the next put's directory fsync makes durable."""
    if more and loc.is_local:
        loc.write_bytes(name, data, create_only=True, sync_dir=False)
    else:
        loc.write_bytes(name, data, create_only=True)


def log_name(version: int, token: str, kind: str) -> str:
    return f"{version}.{token}.{kind}" if token else f"{version}.{kind}"


def snapshot_name(version: int, token: str) -> str:
    return log_name(version, token, "snapshot")


# -- rows files -----------------------------------------------------------------------------------
def encode_rows(keys: list[bytes], values: list, meta: dict) -> bytes:
    """An Arrow IPC file of (key, value) rows whose schema metadata holds ``meta``."""
    from .columnar import binary_array  # noqa: PLC0415 - state.columnar loads numpy: kept off `import state` (the code location)
    table = pa.Table.from_arrays(
        [binary_array(keys), binary_array(values)],
        schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]).with_metadata({"increments": json.dumps(meta)}))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=1 << 20)
    return sink.getvalue().to_pybytes()


def decode_rows(data: bytes) -> tuple[dict, list[bytes], list]:
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    meta = json.loads(table.schema.metadata[b"increments"])
    return meta, table.column("key").to_pylist(), table.column("value").to_pylist()


def decode_meta(data: bytes) -> dict:
    return json.loads(pa.ipc.open_file(pa.BufferReader(data)).schema.metadata[b"increments"])


def write_json(path: str, obj) -> None:
    """Atomically write a JSON file at a local path (kept for callers outside the state store)."""
    location(os.path.dirname(os.path.abspath(path))).write_bytes(os.path.basename(path), json.dumps(obj).encode())


# -- the listing of a store -----------------------------------------------------------------------
@dataclass
class Listing:
    """What one LIST of a store directory shows: every (version, token) with its objects."""
    logs: dict[tuple[int, str], str] = field(default_factory=dict)              # -> object name
    snapshots: dict[tuple[int, str], list[str]] = field(default_factory=dict)   # complete ones -> objects
    partial: dict[tuple[int, str], list[str]] = field(default_factory=dict)     # rocksdb, no _meta.json yet
    log_kinds: set[str] = field(default_factory=set)

    def candidates(self, version: int) -> set[str]:
        return {t for (v, t) in list(self.logs) + list(self.snapshots) if v == version}

    def latest(self) -> int:
        return max((v for v, _ in list(self.logs) + list(self.snapshots)), default=-1)

    def snapshot_is_dir(self, key: tuple[int, str]) -> bool:
        return any("/" in n for n in self.snapshots.get(key, []))

    def dirs_below(self, bound: int) -> list[str]:
        """The snapshot directories (rocksdb) of the versions < bound."""
        return sorted({n.split("/", 1)[0] for d in (self.snapshots, self.partial)
                       for (v, _), names in d.items() if v < bound for n in names if "/" in n})

    def objects_below(self, bound: int) -> list[str]:
        """Every object of every attempt of the versions < bound (complete or not)."""
        out = [n for (v, _), n in self.logs.items() if v < bound]
        for d in (self.snapshots, self.partial):
            out += [n for (v, _), names in d.items() if v < bound for n in names]
        return out


def _local_names(root: str) -> list[str]:
    """The object names under the local directory ``root`` that list_store can use: the files at
    its top, and the files inside its snapshot directories (``<v>[.<token>].snapshot/``); temp
    files (``.tmp-*``) are skipped as the Location's list() skips them. Names only: no stat per
    file (a store directory holds retention_versions changelogs and ~10 snapshot directories,
    listed at every cleanup)."""
    out: list[str] = []
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return out
    for e in entries:
        name = e.name
        if name.startswith(".tmp-"):
            continue
        try:
            is_dir = e.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if not is_dir:
            out.append(name)
            continue
        m = _NAME.match(name)
        if not m or m.group(3) != "snapshot" or m.group(4) is not None:
            continue                        # only a snapshot directory holds objects list_store reads
        _walk_names(e.path, name, out)
    out.sort()
    return out


def _walk_names(path: str, rel: str, out: list[str]) -> None:
    """The files below ``path`` as ``rel/...`` names, temp files and directories skipped."""
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError):
        return
    for e in entries:
        if e.name.startswith(".tmp-"):
            continue
        try:
            is_dir = e.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_dir:
            _walk_names(e.path, f"{rel}/{e.name}", out)
        else:
            out.append(f"{rel}/{e.name}")


def list_store(loc) -> Listing:
    """One LIST of the store directory, parsed (unknown names are ignored). On the local disk a
    names-only scan of the directory (``_local_names``), else the Location's list()."""
    out = Listing()
    dirs: dict[tuple[int, str], list[str]] = {}
    local = loc.local_path() if loc.is_local else None
    names = _local_names(local) if local is not None else [o.name for o in loc.list()]
    for name in names:
        m = _NAME.match(name)
        if not m:
            continue
        key = (int(m.group(1)), m.group(2) or "")
        kind, sub = m.group(3), m.group(4)
        if kind != "snapshot":
            if sub is None:
                out.logs[key] = name
                out.log_kinds.add(kind)
        elif sub is None:
            out.snapshots[key] = [name]
        else:
            dirs.setdefault(key, []).append(name)
    for key, names in dirs.items():
        complete = any(n.endswith("/" + META) for n in names)
        (out.snapshots if complete else out.partial)[key] = names
    return out


# -- loading: follow the lineage back to a snapshot ---------------------------------------------------
def resolve_token(listing: Listing, version: int, token: str | None, where: str) -> str:
    """The token of ``version`` to load: ``token`` when given, else the only candidate."""
    if version < 0:
        return ""
    if token is not None:
        return token
    cands = listing.candidates(version)
    if not cands:
        raise StateStoreError(f"cannot load state version {version} of {where}: no file of it exists "
                              f"(latest with files is {listing.latest()}); an unchanged version has none: "
                              "pass the token the commit log records for it")
    if len(cands) > 1:
        raise StateStoreError(f"cannot load state version {version} of {where}: it was written by {len(cands)} "
                              f"attempts (tokens {', '.join(sorted(cands))}); pass the token the commit log "
                              "records for it")
    return next(iter(cands))


@dataclass
class Trace:
    """How to build (version, token): start from ``snapshot`` ((v, token) or None = empty), then
    apply ``logs`` (meta, keys, values) in order. ``lineage`` maps each version from the snapshot's
    (or 0) to ``version`` to its token on this chain."""
    snapshot: tuple[int, str] | None
    logs: list[tuple[dict, list[bytes], list]]
    lineage: dict[int, str]
    listing: Listing | None = None


def trace(loc, listing: Listing, version: int, token: str, log_kind: str, where: str) -> Trace:
    """Walk back from (version, token) through each log's parent token to a complete snapshot on
    that lineage (or version -1), reading the logs on the way. StateStoreError when a link is missing."""
    logs, lineage = [], {}
    v, tok = version, token
    snap = None
    while v >= 0:
        base, k = split_token(tok)
        if k:                                   # unchanged versions v-k+1 .. v: the content of (v-k, base)
            for i in range(k):
                lineage[v - i] = f"{base}{_DERIVED}{k - i}"
            v, tok = v - k, base
            continue
        lineage[v] = tok
        if (v, tok) in listing.snapshots:
            snap = (v, tok)
            break
        name = listing.logs.get((v, tok))
        if name is None or not name.endswith("." + log_kind):
            what = f"version {v} (token {tok})" + (f", an ancestor of version {version}," if v != version else "")
            raise StateStoreError(f"cannot load state version {version} of {where}: {what} has neither a "
                                  f"snapshot nor a {log_kind} in {loc.url} (deleted by retention, or never written)")
        try:
            meta, keys, values = decode_rows(loc.read_bytes(name))
        except FileNotFoundError as e:
            raise StateStoreError(f"cannot load state version {version} of {where}: {e}") from None
        if meta.get("version") != v or (tok and meta.get("token") != tok):
            raise StateStoreError(f"cannot load state version {version} of {where}: {name} records "
                                  f"version {meta.get('version')} token {meta.get('token')}")
        logs.append((meta, keys, values))
        tok = meta.get("parent", "")
        v -= 1
    logs.reverse()
    return Trace(snap, logs, lineage, listing)


# -- retention --------------------------------------------------------------------------------------
def cleanup_bound(listing: Listing, latest: int, retention: int, lineage: dict[int, str]) -> int:
    """Objects of versions below the returned bound may be deleted (-1: nothing may go).

    The bound is the newest complete snapshot *on this store's lineage* (its token is the lineage's
    token of its version) at or below ``latest - retention + 1`` and below ``latest``. Versions below
    ``latest`` are shared with every other attempt of ``latest`` (all of them were built on the
    version the commit log names), so a losing attempt never deletes what a winner needs: everything
    from a snapshot of the shared lineage on is kept, whatever the winner's tokens above it.
    This relies on the engine's fence: an attempt commits at most one version the commit log does
    not name (it learns that it lost when it writes that version's commit, and stops)."""
    cap = min(latest - retention + 1, latest - 1)
    found = [v for (v, t) in listing.snapshots if v <= cap and lineage.get(v) == t]
    return max(found, default=-1)

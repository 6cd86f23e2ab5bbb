"""The state reader: any operator's state at any version as an Arrow table.

``read_state(checkpoint, operator, version=None, tokens=None, storage_options=None, partition=None)``
rebuilds each partition's store read-only (RocksDB into a private temp working copy, never touching
the engine's) and returns one row per state row:

* with ``_schema.json``: one typed column per key field, then per value field;
* without: binary columns ``key`` and ``value``;

plus an int32 ``_partition`` column.  ``checkpoint`` is a Location or a path/URL.
``version=None`` reads the newest version that every partition has files for (the engine should
pass the last committed batch id to be exact). ``tokens`` ({partition: token}) name the attempt of
``version`` to read, as the commit log records them; without them a version written by several
attempts (a redo) is refused as ambiguous, a version no partition wrote is refused, and a
partition with no file at ``version`` (unchanged versions write none, see state.files) is read at
its newest version below it that has files: the same content on a single lineage. Versions due for a snapshot always have files, so ``version=None``
is at most snapshot_interval - 1 versions older than the newest a partition changed at.
"""
from __future__ import annotations

import tempfile

from increments import storage
from increments.lazy import lazy_module
from increments.types import duckdb_to_arrow

from . import files
from .base import StateStoreError
from .encoding import decode_key, decode_value
from .schema import read_state_schema

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py


def _partitions(op_loc, operator: str) -> list[int]:
    _, dirs = op_loc.list_dir()
    parts = sorted(int(d.rsplit("/", 1)[-1]) for d in dirs if d.rsplit("/", 1)[-1].isdigit())
    if not parts:
        raise StateStoreError(f"no state for operator {operator!r} in {op_loc.url}")
    return parts


def _provider_kind(listing: files.Listing) -> str:
    if "delta" in listing.log_kinds:
        return "memory"
    if "changelog" in listing.log_kinds:
        return "rocksdb"
    for key in listing.snapshots:
        return "rocksdb" if listing.snapshot_is_dir(key) else "memory"
    return "memory"   # no versions: empty either way


def _newest_with_files(listing: files.Listing, version: int) -> int:
    """``version`` when some attempt wrote files for it, else the newest version below it that has
    files (-1: none)."""
    found = [v for (v, _) in list(listing.logs) + list(listing.snapshots) if v <= version]
    return max(found, default=-1)


def _read_partition(checkpoint, operator: str, partition: int, version: int, token: str | None,
                    kind: str, tmp: str) -> list[tuple[bytes, bytes]]:
    from .providers import make_provider  # noqa: PLC0415 - the providers load rocksdict: kept off `import state`
    with make_provider(kind, checkpoint, local_dir=tmp) as provider:
        store = provider.open(operator, partition, version, token)
        try:
            return list(store.iter_all())
        finally:
            store.close()


def read_state(checkpoint, operator: str, version: int | None = None, tokens: dict[int, str] | None = None,
               storage_options: dict | None = None, partition: int | None = None) -> pa.Table:
    """Arrow table of the operator's state at ``version`` (see module docstring)."""
    loc = storage.location(checkpoint, storage_options)
    op_loc = loc.child("state", operator)
    parts = _partitions(op_loc, operator)
    if partition is not None:
        if partition not in parts:
            raise StateStoreError(f"operator {operator!r} has no partition {partition}")
        parts = [partition]
    listings = {p: files.list_store(op_loc.child(str(p))) for p in parts}
    if version is None:
        version = min((lst.latest() for lst in listings.values()), default=-1)
    newest = max((lst.latest() for lst in listings.values()), default=-1)
    if version > newest and not tokens:
        raise StateStoreError(f"cannot read state version {version} of operator {operator!r}: no partition "
                              f"has it (the newest any partition wrote is {newest})")
    rows: list[tuple[bytes, bytes]] = []
    pcol: list[int] = []
    with tempfile.TemporaryDirectory(prefix="increments-state-reader-") as tmp:
        for p in parts:
            token = (tokens or {}).get(p)
            v = version if token is not None else _newest_with_files(listings[p], version)
            got = _read_partition(loc, operator, p, v, token, _provider_kind(listings[p]), tmp)
            rows.extend(got)
            pcol.extend([p] * len(got))
    return _to_table(read_state_schema(loc, operator), rows, pcol)


def _to_table(schema: dict | None, rows: list[tuple[bytes, bytes]], pcol: list[int]) -> pa.Table:
    part = pa.array(pcol, pa.int32())
    if schema is None:
        return pa.table({"key": pa.array([k for k, _ in rows], pa.binary()),
                         "value": pa.array([v for _, v in rows], pa.binary()),
                         "_partition": part})
    keys = [decode_key(k) for k, _ in rows]
    values = [decode_value(v) for _, v in rows]
    cols, names = [], []
    for fields, tuples in ((schema["key"], keys), (schema["value"], values)):
        for i, (name, typ) in enumerate(fields):
            data = [t[i] if i < len(t) else None for t in tuples]
            arrow = duckdb_to_arrow(typ)
            cols.append(pa.array(data, arrow) if arrow is not None else pa.array(data))
            names.append(name)
    return pa.Table.from_arrays(cols + [part], names=names + ["_partition"])


def state_view(con, name: str, checkpoint, operator: str, version: int | None = None, **kw) -> pa.Table:
    """Register the state as DuckDB view ``name`` on connection ``con``; returns the table
    (keep a reference while the view is in use). ``kw``: read_state's tokens, storage_options."""
    table = read_state(checkpoint, operator, version, **kw)
    con.register(name, table)
    return table

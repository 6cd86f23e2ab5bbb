"""The state reader: any operator's state at any version as an Arrow table.

``read_state(checkpoint_dir, operator, version=None, partition=None)`` rebuilds each
partition's store read-only (RocksDB into a private temp working copy, never touching the
engine's) and returns one row per state row:

* with ``_schema.json``: one typed column per key field, then per value field;
* without: binary columns ``key`` and ``value``;

plus an int32 ``_partition`` column.  ``version=None`` reads the newest version that every
partition has (the engine should pass the last committed batch id to be exact).
"""
from __future__ import annotations

import os
import tempfile

import pyarrow as pa

from . import files
from .base import StateStoreError
from .encoding import decode_key, decode_value
from .schema import arrow_type, read_state_schema


def _partitions(checkpoint_dir: str, operator: str) -> list[int]:
    d = os.path.join(checkpoint_dir, "state", operator)
    if not os.path.isdir(d):
        raise StateStoreError(f"no state for operator {operator!r} in {checkpoint_dir}")
    return sorted(int(n) for n in os.listdir(d) if n.isdigit())


def _provider_kind(store_dir: str) -> str:
    vs = files.list_versions(store_dir)
    if vs["delta"]:
        return "memory"
    if vs["changelog"]:
        return "rocksdb"
    for s in vs["snapshot"]:
        return "rocksdb" if os.path.isdir(os.path.join(store_dir, f"{s}.snapshot")) else "memory"
    return "memory"   # no versions: empty either way


def _read_partition(checkpoint_dir: str, operator: str, partition: int, version: int,
                    tmp: str) -> list[tuple[bytes, bytes]]:
    from .base import make_provider
    kind = _provider_kind(files.store_dir(checkpoint_dir, operator, partition))
    conf = {"local_dir": tmp} if kind == "rocksdb" else {}
    with make_provider(kind, checkpoint_dir, **conf) as provider:
        store = provider.open(operator, partition, version)
        try:
            return list(store.iter_all())
        finally:
            store.close()


def _latest_common(checkpoint_dir: str, operator: str, parts: list[int]) -> int:
    latest = []
    for p in parts:
        vs = files.list_versions(files.store_dir(checkpoint_dir, operator, p))
        latest.append(max(vs["delta"] | vs["changelog"] | vs["snapshot"], default=-1))
    return min(latest, default=-1)


def read_state(checkpoint_dir: str, operator: str, version: int | None = None,
               partition: int | None = None) -> pa.Table:
    """Arrow table of the operator's state at ``version`` (see module docstring)."""
    parts = _partitions(checkpoint_dir, operator)
    if partition is not None:
        if partition not in parts:
            raise StateStoreError(f"operator {operator!r} has no partition {partition}")
        parts = [partition]
    if version is None:
        version = _latest_common(checkpoint_dir, operator, parts)
    rows: list[tuple[bytes, bytes]] = []
    pcol: list[int] = []
    with tempfile.TemporaryDirectory(prefix="increments-state-reader-") as tmp:
        for p in parts:
            got = _read_partition(checkpoint_dir, operator, p, version, os.path.join(tmp, str(p)))
            rows.extend(got)
            pcol.extend([p] * len(got))
    return _to_table(read_state_schema(checkpoint_dir, operator), rows, pcol)


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
            cols.append(pa.array(data, arrow_type(typ)) if arrow_type(typ) else pa.array(data))
            names.append(name)
    return pa.Table.from_arrays(cols + [part], names=names + ["_partition"])


def state_view(con, name: str, checkpoint_dir: str, operator: str,
               version: int | None = None) -> pa.Table:
    """Register the state as DuckDB view ``name`` on connection ``con``; returns the table
    (keep a reference while the view is in use)."""
    table = read_state(checkpoint_dir, operator, version)
    con.register(name, table)
    return table

"""Reading a Delta table's data files as Arrow, shared by the Delta stream sources (appends and the
change data feed) and read.delta's snapshot reader (sinks/delta.read_table).

- `file_location(table, path, storage_options)`: where an action's `path` lives: relative to the
  table's Location, or an absolute path / URL of its own (shallow clones, some writers).
- `read_parquet(loc, name)`: the file decoded by pyarrow on this thread: a local file by its path,
  a remote one copied into Arrow memory first, so no Python buffer reaches Arrow's IO threads (the
  abort at exit sinks/delta.read_table describes). FileNotFoundError names the file.
- `conform(t, schema, partition_values)`: the file's columns in the table's schema: cast, partition
  columns from the action's partitionValues (the log's text, or typed values, cast), missing
  columns as NULL.
"""
from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote

from ..lazy import lazy_module

from .. import storage
from ..storage import Location

pa = lazy_module("pyarrow")
pq = lazy_module("pyarrow.parquet")  # loaded at first use: increments/lazy.py


def file_location(table: Location, path: str, storage_options: dict | None = None) -> tuple[Location, str]:
    rel = unquote(path)
    if "://" in rel or os.path.isabs(rel):
        parent, _, name = rel.rpartition("/")
        return storage.location(parent or "/", storage_options), name
    return table, rel


def read_parquet(loc: Location, name: str) -> pa.Table:
    local = loc.local_path(name)
    try:
        if local is not None:
            return pq.read_table(local)
        data = loc.read_bytes(name)
    except FileNotFoundError:
        raise FileNotFoundError(loc.join(name)) from None
    buf = pa.allocate_buffer(len(data))
    pa.FixedSizeBufferWriter(buf).write(data)
    return pq.read_table(pa.BufferReader(buf))


def conform(t: pa.Table, schema: pa.Schema, partition_values: dict[str, Any] | None) -> list[pa.ChunkedArray]:
    parts = partition_values or {}
    n = t.num_rows
    cols = []
    for f in schema:
        if f.name in t.column_names:
            cols.append(t.column(f.name).cast(f.type))
        elif f.name in parts:
            cols.append(pa.chunked_array([pa.array([parts[f.name]] * n).cast(f.type)]))
        else:
            cols.append(pa.chunked_array([pa.nulls(n, f.type)]))
    return cols

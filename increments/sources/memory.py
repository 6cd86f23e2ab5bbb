"""read_stream.memory(schema): a test and notebook source fed with `.add_data(rows)`.

Offsets are the number of add_data calls taken so far; each call's rows stay in memory, so a
redo of a batch within the same process replays exactly. (Like Spark's MemoryStream, this source
does not survive a process restart: use files, Kafka or Delta for that.)
"""
from __future__ import annotations

import threading
from typing import Any, Iterable

from ..lazy import lazy_module

from ..types import parse_schema
from .base import Source

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py


class MemorySource(Source):
    def for_query(self) -> "MemorySource":
        """The same object: the user adds data to it, and every query reading it sees that data."""
        return self

    def __init__(self, schema: Any, name: str | None = None):
        self._schema = parse_schema(schema).to_arrow()
        self._chunks: list[pa.Table] = []
        self._lock = threading.Lock()
        self._target: int | None = None
        self.name = name or f"memory-{id(self):x}"

    @property
    def description(self) -> str:
        return f"MemoryStream[{self.name}]"

    def schema(self) -> pa.Schema:
        return self._schema

    def add_data(self, rows: "Iterable[dict] | pa.Table | list[tuple]") -> int:
        """Append rows (dicts, tuples in schema order, or an Arrow table); returns the new offset."""
        if isinstance(rows, pa.Table):
            table = rows.select(self._schema.names).cast(self._schema)
        else:
            rows = list(rows)
            if rows and not isinstance(rows[0], dict):
                rows = [dict(zip(self._schema.names, r)) for r in rows]
            table = pa.Table.from_pylist(rows, schema=self._schema)
        with self._lock:
            self._chunks.append(table)
            return len(self._chunks)

    def initial_offset(self) -> int:
        return 0

    def latest_offset(self, start: int, limited: bool = True) -> int:
        with self._lock:
            n = len(self._chunks)
        return min(n, self._target) if self._target is not None else n

    def prepare_available_now(self) -> None:
        with self._lock:
            self._target = len(self._chunks)

    def available_now_target(self) -> Any:
        return self._target

    def set_available_now_target(self, target: Any) -> None:
        self._target = target

    def read(self, start: int, end: int) -> pa.Table:
        with self._lock:
            if end > len(self._chunks):
                raise RuntimeError(self.fail(f"offsets ({start}, {end}] are not in this process's memory "
                                             "(a memory source does not survive a restart)"))
            chunks = self._chunks[start:end]
        if not chunks:
            return self._schema.empty_table()
        return pa.concat_tables(chunks)

"""format("memory"): results kept in this process under the query name, for tests and notebooks.

`inc.memory_table(name)` returns the sink's current table: append/update modes hold every batch's
rows in batch order, complete mode holds the last batch's result. `inc.memory_batches(name)`
returns {batch_id: table}. A replayed batch replaces its own rows (idempotent per batch id).
"""
from __future__ import annotations

import threading

from ..lazy import lazy_module

from .base import Sink, SinkResult

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py

_TABLES: dict[str, "MemorySink"] = {}
_LOCK = threading.Lock()


class MemorySink(Sink):
    def __init__(self, name: str):
        if not name:
            raise ValueError("format('memory') needs .query_name(name): the table is found by that name")
        self.name = name
        self.batches: dict[int, pa.Table] = {}
        with _LOCK:
            _TABLES[name] = self

    @property
    def description(self) -> str:
        return f"MemorySink[{self.name}]"

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        with _LOCK:
            replay = batch_id in self.batches
            self.batches[batch_id] = table
        return SinkResult(table.num_rows, skipped_replay=replay)

    def table(self) -> pa.Table:
        with _LOCK:
            items = sorted(self.batches.items())
        if not items:
            return pa.table({})
        if self.ctx.output_mode == "complete":
            return items[-1][1]
        return pa.concat_tables([t for _, t in items])


def memory_sink(name: str) -> MemorySink:
    with _LOCK:
        if name not in _TABLES:
            raise KeyError(f"no memory sink named {name!r}; start a query with .format('memory').query_name({name!r})")
        return _TABLES[name]


def memory_table(name: str) -> pa.Table:
    return memory_sink(name).table()


def memory_batches(name: str) -> dict[int, pa.Table]:
    return dict(memory_sink(name).batches)

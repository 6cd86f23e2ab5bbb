"""foreach_batch(fn): calls fn(table, batch_id) with each batch's output.

Replay: a batch that is redone after a crash before commits[N] calls fn again with the same
batch_id and the same rows. To be exactly-once, make fn idempotent per batch_id, e.g. write
with the batch id as a transaction marker (Delta: CommitProperties(app_transactions=
[Transaction(app_id, version=batch_id)]); SQL: a (query, batch_id) marker row in the same
transaction), or overwrite a partition named by the batch id. See examples/foreach_batch_two_tables.py.
"""
from __future__ import annotations

from typing import Callable

import pyarrow as pa

from .base import Sink, SinkResult


class ForeachBatchSink(Sink):
    def __init__(self, fn: Callable[[pa.Table, int], object]):
        if not callable(fn):
            raise TypeError("foreach_batch needs a callable fn(table, batch_id)")
        self.fn = fn

    @property
    def description(self) -> str:
        return f"ForeachBatchSink[{getattr(self.fn, '__qualname__', repr(self.fn))}]"

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        ret = self.fn(table, batch_id)
        version = ret if isinstance(ret, (int, str)) else None
        return SinkResult(table.num_rows, version=version)

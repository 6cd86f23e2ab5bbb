"""The sink interface.

Contract: `open(ctx)` is called once per process before its first write (the SinkContext names the
query, its output mode and checkpoint; the base class keeps it as `self.ctx`). Then
`add_batch(batch_id, table)` may be called more than once for the same batch id (a redo after a
crash before commits[N]); the sink must then leave the same output as one call (skip what it
already holds, or replace it). It returns a SinkResult: the rows it wrote and, where the system
has one, the version it wrote (the Delta table version) for lineage.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from ..lazy import lazy_module

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py


@dataclass
class SinkContext:
    query_id: str
    query_name: str
    output_mode: str
    checkpoint: Any                                        # an increments.storage.Location (or a path)
    key_columns: list[str] = field(default_factory=list)   # result keys for update/complete modes
    #: the query-level storage_options; a sink merges its own (.option("storage_options", ...)) over them
    storage_options: dict[str, Any] = field(default_factory=dict)
    #: locate(batch_id, needles) -> "input file F, line L" (the first line of the batch's input files
    #: holding one of the byte strings), or None; for error messages that name the input row
    locate: Any = None
    #: the SQLAlchemy URL of the query's offsets/commits log (a sink may keep its catalog there)
    log_url: str | None = None


@dataclass
class SinkResult:
    num_output_rows: int
    version: Any = None
    skipped_replay: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class Sink(ABC):
    supported_modes: tuple[str, ...] = ("append", "update", "complete")

    @property
    @abstractmethod
    def description(self) -> str: ...

    def open(self, ctx: SinkContext) -> None:
        """Called once before the first batch (and in every process that runs write steps)."""
        self.ctx = ctx

    @abstractmethod
    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult: ...

    def check_output_schema(self, schema: pa.Schema) -> None:
        """Called when the query starts, before any batch, with the query's output schema: a sink
        whose columns have a fixed contract (Kafka's value/key/...) refuses a query that does not
        fit (AnalysisException). Default: nothing to check."""

    def holds_query(self, query_id: str) -> bool | None:
        """Does the sink hold output written by this query id? None: the sink cannot tell. (Asked
        after open() when a checkpoint lost its metadata.json; see checkpoint/identity.py.)"""
        return None

    def foreign_output(self, query_id: str) -> str | None:
        """What the sink already holds that another writer than this query id wrote (another query
        on a new checkpoint, or anything else), in words for a warning; None: nothing, or the sink
        cannot tell. Asked once at a query's first start (no batch committed yet): every sink keys
        its idempotence by (query id, batch id), so such output never makes this query skip a
        batch; the start says so (execution/runtime.py: warn_foreign_output)."""
        return None

    def close(self) -> None:
        pass

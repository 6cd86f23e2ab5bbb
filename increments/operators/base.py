"""The physical operator interface and the per-batch context operators run in.

An operator's `execute(ctx)` returns the Arrow table it emits for the batch. Stateful operators
open their state through `ctx.stores(self)`: one store per state partition, loaded at version
batch_id - 1. The process step commits every opened store at version batch_id after the whole
plan ran (or aborts them all if anything failed), so a batch's state changes are all-or-nothing
per partition and a redo starts again from batch_id - 1.

Watermarks inside one batch (SEMANTICS.md rule 4): `ctx.late_watermark_ms` (W_{b-1}) decides
which rows are late; `ctx.watermark_ms` (W_b) decides eviction and append-mode emission. These are
the global watermark; a stateful operator uses its own input watermark, derived from them by
`ctx.late_watermark(op)` / `ctx.eviction_watermark(op)` (docs/semantics.md, "Watermark propagation"):
W - op.input_watermark_offset_ms, never below 0, and 0 while the global one is 0 or when no
watermarked input reaches the operator (offset None).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import pyarrow as pa

from ..sinks import late_rows


@dataclass
class EventTimeStats:
    """Event times (ms) seen by one watermark node in one batch, late rows included."""
    max_ms: int | None = None
    min_ms: int | None = None
    sum_ms: int = 0
    count: int = 0

    def add(self, mn: int, mx: int, total: int, count: int) -> None:
        if count == 0:
            return
        self.max_ms = mx if self.max_ms is None else max(self.max_ms, mx)
        self.min_ms = mn if self.min_ms is None else min(self.min_ms, mn)
        self.sum_ms += total
        self.count += count


@dataclass
class BatchContext:
    batch_id: int
    watermark_ms: int
    late_watermark_ms: int
    timestamp_ms: int
    inputs: dict[int, pa.Table]
    query_name: str = ""
    query_id: str = ""
    output_mode: str = "append"
    state: Any = None                          # execution.state_manager.StateManager
    event_time: dict[str, EventTimeStats] = field(default_factory=dict)
    dropped_by_watermark: dict[str, int] = field(default_factory=dict)
    custom_metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    dead_letters: dict[str, int] = field(default_factory=dict)
    static_versions: dict[str, Any] = field(default_factory=dict)
    #: expectation name -> {name, condition, on_violation, passed, failed} (operators/expectations.py)
    expectations: dict[str, dict[str, Any]] = field(default_factory=dict)

    def stores(self, op: "PhysicalOp") -> list:
        """The op's state stores, one per partition, loaded at version batch_id - 1."""
        return self.state.stores_for(op.operator_id, self.batch_id)

    def eviction_watermark(self, op: "PhysicalOp") -> int:
        """The op's input watermark for eviction and append-mode emission in this batch (ms)."""
        return derive_watermark(self.watermark_ms, op.input_watermark_offset_ms)

    def late_watermark(self, op: "PhysicalOp") -> int:
        """The op's input watermark for dropping late rows in this batch: its eviction watermark of
        the previous batch (ms)."""
        return derive_watermark(self.late_watermark_ms, op.input_watermark_offset_ms)

    def count_dropped(self, op: "PhysicalOp", n: int) -> None:
        self.dropped_by_watermark[op.operator_id] = self.dropped_by_watermark.get(op.operator_id, 0) + int(n)

    def route_late(self, op: "PhysicalOp", parts: list[tuple[str | None, pa.Table]], watermark_ms: int) -> None:
        """Send the input rows `op` drops as late ((side, rows) pairs; side None for one input) to
        its late_rows table(s), once per batch (sinks/late_rows.py); progress counts them per
        operator as num_late_rows_written. Nothing happens without a late_rows target."""
        targets = op.late_targets
        if not targets:
            return
        by_path: dict[str, tuple[Any, list]] = {}
        for side, rows in parts:
            t = targets.get(side)
            if t is not None and rows.num_rows:
                by_path.setdefault(t.path, (t, []))[1].append((side, rows))
        n = sum(late_rows.write(t, self, op, ps, watermark_ms) for t, ps in by_path.values())
        m = self.custom_metrics.setdefault(op.operator_id, {})
        m["num_late_rows_written"] = m.get("num_late_rows_written", 0) + n

    def where(self, what: str) -> str:
        return f"query {self.query_name!r}, batch {self.batch_id}: {what}"


def derive_watermark(global_ms: int, offset_ms: int | None) -> int:
    """An operator's input watermark from the global one (Spark's PropagateWatermarkSimulator):
    0 while the global watermark is 0 or when no watermark reaches the operator, else
    max(global - offset, 0)."""
    if offset_ms is None or global_ms == 0:
        return 0
    return max(int(global_ms) - int(offset_ms), 0)


class PhysicalOp:
    """Base of physical operators. Subclasses set `schema` and implement `execute`."""

    stateful: bool = False
    #: evicts state by watermark: the query then runs one trailing no-data batch when the
    #: watermark advanced past the last batch's (SEMANTICS.md rule 2)
    evicts_by_watermark: bool = False
    operator_id: str = ""
    operator_name: str = ""
    #: how far this operator's input watermark lags the global one (ms); None: no watermarked input
    #: reaches it. Set by the compiler (plan/watermarks.py) after the tree is built.
    input_watermark_offset_ms: int | None = 0
    #: where rows this operator drops as late go: {side or None: DeadLetter target} (plan/late_rows.py)
    late_targets: dict = {}
    #: the name `frame.alias(name)` gave this operator's output (set by Compiler.build on the
    #: aliased node's operator, kept by the filter/with_column stages above it): `name.column`
    #: references to its columns resolve to them (plan/compiler.py, operators/join_outputs.py)
    alias: str | None = None
    #: qualified references this operator's output resolves: {qualifier: {column: output column}},
    #: set by a join (its sides' aliases) and kept by the filter/with_column stages above it;
    #: None: only `alias` (if any) qualifies its columns
    qualifiers: dict[str, dict[str, str]] | None = None
    #: a stateful operator's grouping / dedup key columns, in output order (set by its builder):
    #: the plan fingerprint records them and an update-mode sink merges on the first ones found
    #: (execution/runtime.py); () for operators without keys
    key_columns: Sequence[str] = ()
    #: True once this operator object wrote state/<operator id>/_schema.json
    #: (operators/state_util.write_schema_once); a new query object writes it again (create-only)
    _schema_written: bool = False

    def __init__(self, children: list["PhysicalOp"], schema: pa.Schema):
        self.children = children
        self.schema = schema
        #: event-time columns with a watermark: name -> (watermark id, delay ms)
        self.event_time_cols: dict[str, tuple[str, int]] = {}
        if children:
            for c in children:
                for k, v in c.event_time_cols.items():
                    if k in schema.names:
                        self.event_time_cols[k] = v

    def execute(self, ctx: BatchContext) -> pa.Table:
        raise NotImplementedError

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def describe(self) -> str:
        return type(self).__name__

    def state_schema(self) -> dict[str, Any] | None:
        """Key and value fields of this operator's state (for the checkpoint's compatibility check)."""
        return None

    def state_functions(self) -> list[str] | None:
        """What this operator computes into its state, beyond its state schema: each aggregate's
        function and input (`min(amount) AS m`), a join's condition. Recorded in the checkpoint's
        conf (`state_functions[<id>:<name>]`) and fixed there: min -> max keeps the schema but
        not the meaning of the stored values. None: nothing beyond the schema."""
        return None

    def columns_read(self, needed: set[str] | None) -> set[str] | None:
        """The input columns this operator reads, given the columns needed of its output (None:
        all of them); None means every input column (the default). Only single-input operators
        are asked (plan/compiler.py prune_scans): an override lets the scans below read fewer."""
        return None

    def output_watermark_offset(self, input_offset_ms: int | None) -> int | None:
        """The watermark this operator passes downstream, as an offset behind the global one, given
        its input's. Stateless operators and most stateful ones pass their input's on unchanged; a
        stream-stream join passes the min of its state watermarks (operators/join.py)."""
        return input_offset_ms

    def has_time_based_work(self, watermark_ms: int, timestamp_ms: int) -> bool:
        """Work a batch without new data would do (e.g. processing-time timers due)."""
        return False

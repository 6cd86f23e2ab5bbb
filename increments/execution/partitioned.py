"""The process step fanned out per state partition (runners that spread one batch over workers:
Dagster's multiprocess, Kubernetes or Celery executors). No dagster import here.

A batch of a plan with exactly one stateful operator S (an aggregation without sliding or session
windows, a deduplication, or apply_changes), with only single-input stateless operators above it,
runs as:

    split (after read):   the stateless subtree below S over the staged inputs -> S's input rows;
                          each row's state partition p = S's key -> partition function
                          (partitioning.partition_sql over the same key columns S hashes); the
                          rows of each p are staged as slice_<p>; the subtree's batch metrics
                          (event times, late/dead rows, static versions) as JSON "split" (SplitResult)
    partition p (one op each, in any process or machine; the fence is checked first):
                          open only partition p of S's stores at N-1 (the token of commits[N-1]);
                          run S and the operators above it on slice_<p>; commit p as version N;
                          stage output_<p> and "process_<p>" (PartitionResult: token of p, metrics)
    join (after every partition succeeded):
                          concatenate the outputs, merge the metrics and tokens
                          ({operator: [token of partition 0, 1, ...]}); stage "output" and
                          "process" exactly as steps.process_batch does, so write and commit are
                          unchanged (commits[N] names every partition's token)

A row hashed to p can only touch partition p's state: every other partition's store is a
placeholder that refuses reads and writes of keys (a routing error fails the batch instead of
reading or writing the wrong state). Chained stateful operators, joins, session and sliding
windows and transform_with_state need rows or state of several partitions per input row:
`fanout_reason` names why, and the runner keeps the one process step for them.

A stateless plan fans out too: split cuts every staged input into n contiguous row ranges (n =
the state partitions setting) and op p runs the whole plan over range p of each input; join
concatenates the outputs in order, so the batch's output rows keep their order.
"""
from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

from state.base import StateMetrics

from ..operators.aggregate import WindowAggregateOp
from ..operators.apply_changes import ApplyChangesOp
from ..operators.base import BatchContext, PhysicalOp
from ..operators.dedup import DeduplicateOp
from ..operators.partitioning import partition_sql, split_by_partition
from ..sql import quote_ident, run_sql
from .state_manager import StateManager
from .step_results import BatchMetrics, PartitionResult, ProcessResult, SplitResult
from .steps import _base_tokens, _state_progress, check_owner, expectations_report


def stateful_op(plan: Any) -> PhysicalOp | None:
    return plan.stateful_ops[0] if len(plan.stateful_ops) == 1 else None


def fanout_reason(plan: Any) -> str | None:
    """None when the process step can fan out per state partition, else why not (for messages)."""
    if not plan.stateful_ops:                  # stateless: row-range slices of every input
        return _once_per_batch(plan.root, None)
    if len(plan.stateful_ops) > 1:
        return ("chained stateful operators: the second one's input depends on the first one's state, "
                "of every partition")
    s = plan.stateful_ops[0]
    if isinstance(s, WindowAggregateOp):
        if s.window is not None and s.window.size_ms != s.window.slide_ms:
            return "a sliding window puts one input row into several state partitions"
    elif not isinstance(s, (DeduplicateOp, ApplyChangesOp)):
        return f"{s.operator_name or type(s).__name__}: its input rows cannot be routed to one partition up front"
    node = plan.root
    while node is not s:                       # above S: a chain of single-input operators
        if len(node.children) != 1:
            return f"{node.describe()} above the stateful operator has several inputs"
        node = node.children[0]
    return _once_per_batch(plan.root, s)


def _once_per_batch(root: PhysicalOp, below: PhysicalOp | None) -> str | None:
    """Operators that would run once per partition op and write a side table once per batch (a
    parse_json dead-letter table is committed once per (query, batch): a second partition's rows
    would be taken for a replay and dropped). Below the stateful operator they run once, in split."""
    def walk(op: PhysicalOp):
        if op is below:
            return
        yield op
        for c in op.children:
            yield from walk(c)
    for op in walk(root):
        if getattr(op, "dead_letter", None) is not None:
            return (f"{op.describe()} writes its dead-letter table once per batch; in one op per partition "
                    "a second partition's rows would be skipped as a replay")
    return None


def _partition_sql(s: PhysicalOp, n: int) -> tuple[str, str]:
    """(SQL of each input row's state partition over relation __in, the FROM relation)."""
    if isinstance(s, WindowAggregateOp):
        keys = [quote_ident(k) for k in s.store_plain]
        if s.window is None:
            return partition_sql(keys, n), "__in"
        w = s.window
        slide, off = w.slide_ms * 1000, w.start_ms * 1000
        t = f"epoch_us({quote_ident(w.column)})"
        ws = f"({t} - ((({t} - {off}) % {slide}) + {slide}) % {slide})"   # as WindowAggregateOp._partials
        cols = ", ".join(dict.fromkeys(keys))
        return partition_sql(["__ws"] + keys, n), f"(SELECT {cols + ', ' if cols else ''}{ws} AS __ws FROM __in)"
    if isinstance(s, ApplyChangesOp):                      # as ApplyChangesOp._events hashes its keys
        return partition_sql([quote_ident(k) for k in s.keys], n), "__in"
    keys = ([quote_ident(s.event_col)] if s.time_in_key else []) + [quote_ident(c) for c in s.key_cols]   # DeduplicateOp
    return partition_sql(keys, n), "__in"


def partition_of_rows(s: PhysicalOp, table: pa.Table, n: int) -> pa.Array:
    """The state partition (int32) of each of S's input rows."""
    if n <= 1 or table.num_rows == 0:
        return pa.array([0] * table.num_rows, pa.int32())
    expr, rel = _partition_sql(s, n)
    out = run_sql(f"SELECT CAST({expr} AS INTEGER) AS __p FROM {rel}", {"__in": table})
    return out.column(0).combine_chunks()


def _context(rt: Any, e: Any, inputs: dict[int, pa.Table], state: Any) -> BatchContext:
    return BatchContext(e.batch_id, e.watermark_ms, e.late_watermark_ms, e.timestamp_ms, inputs,
                        query_name=rt.name, query_id=rt.query_id, output_mode=rt.output_mode, state=state)


def split_batch(rt: Any, plan: Any) -> SplitResult:
    """Run the stateless subtree below S; stage S's input rows per partition (see module doc).
    A stateless plan: every input's rows cut into n contiguous ranges (slice p of each input)."""
    t0 = time.perf_counter()
    e = plan.entry
    s = stateful_op(rt.plan)
    n = rt.state.partitions
    inputs = {i: rt.staging.get_table(e.batch_id, f"input_{i}") for i in range(len(rt.sources))}
    if s is None:
        counts = [0] * n
        for i, table in inputs.items():
            step = -(-table.num_rows // n) if table.num_rows else 0
            for p in range(n):
                part = table.slice(min(p * step, table.num_rows), step) if step else table
                rt.staging.put_table(e.batch_id, f"slice_{p}_in{i}", part)
                counts[p] += part.num_rows
        info = SplitResult(n, counts, int((time.perf_counter() - t0) * 1000), stateless=True)
        rt.staging.put_json(e.batch_id, SplitResult.NAME, info.to_json())
        return info
    ctx = _context(rt, e, inputs, rt.state)
    rows = s.children[0].execute(ctx)
    ids = partition_of_rows(s, rows, n)
    slices = split_by_partition(rows.append_column("__p", ids), n) if rows.num_rows else [rows] * n
    counts = []
    for p, part in enumerate(slices):
        if "__p" in part.column_names:
            part = part.drop_columns(["__p"])
        rt.staging.put_table(e.batch_id, f"slice_{p}", part)
        counts.append(part.num_rows)
    info = SplitResult(n, counts, int((time.perf_counter() - t0) * 1000), metrics=BatchMetrics.of(ctx))
    rt.staging.put_json(e.batch_id, SplitResult.NAME, info.to_json())
    return info


class _Slice(PhysicalOp):
    """The leaf that hands a partition's staged rows to S in place of its stateless subtree."""

    def __init__(self, like: PhysicalOp, table: pa.Table):
        super().__init__([], like.schema)
        self.event_time_cols = dict(like.event_time_cols)
        self.table = table

    def execute(self, ctx: BatchContext) -> pa.Table:
        return self.table


class _Elsewhere:
    """Another partition's store, in a partition op: empty, and any keyed access is a routing error."""
    token = None

    def __init__(self, operator: str, partition: int, owner: int):
        self.operator, self.partition, self.owner = operator, partition, owner

    def _refuse(self, *_a: Any, **_k: Any) -> Any:
        raise RuntimeError(f"state of operator {self.operator} partition {self.partition} touched by the op of "
                           f"partition {self.owner}: a row was routed to the wrong partition")

    get = put = delete = _refuse

    def multi_get(self, keys: list) -> list:
        return self._refuse() if keys else []

    def put_many(self, keys: list, values: list) -> None:
        if keys:
            self._refuse()

    def delete_many(self, keys: list) -> None:
        if keys:
            self._refuse()

    def range_keys(self, start: Any, end: Any) -> list:
        return []

    def range_scan(self, start: Any, end: Any):
        return iter(())

    def prefix_scan(self, prefix: bytes):
        return iter(())

    def iter_all(self):
        return iter(())

    def delete_range(self, start: Any, end: Any) -> int:
        return 0

    def commit(self, version: int) -> int:
        return version

    def metrics(self) -> Any:
        return StateMetrics()

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


class PartitionStateManager(StateManager):
    """A StateManager that opens only partition `partition` of every operator's stores."""

    def __init__(self, base: StateManager, partition: int):
        super().__init__(base.checkpoint, base.provider_name, base.partitions, base.changelog, base.local_dir)
        self.partition = partition
        self._base_manager = base

    @property
    def provider(self):
        return self._base_manager.provider        # one provider per process; closed with the runtime

    def stores_for(self, operator_id: str, batch_id: int) -> list[Any]:
        stores = self._open.get(operator_id)
        if stores is None:
            self._base_manager._await_warm()        # the shared provider's working copies (StateManager.warm)
            p, v = self.partition, batch_id - 1
            real = self.provider.open(operator_id, p, v, self._token(operator_id, p, v))
            stores = [real if i == p else _Elsewhere(operator_id, i, p) for i in range(self.partitions)]
            self._open[operator_id] = stores
        return stores

    def close(self) -> None:
        self.abort_all()


def process_partition(rt: Any, plan: Any, p: int) -> PartitionResult:
    """Partition p of batch N: S and the operators above it on slice_<p>; state p committed as N."""
    t0 = time.perf_counter()
    e = plan.entry
    check_owner(rt, e.batch_id, f"process (partition {p})")
    s = stateful_op(rt.plan)
    if s is None:
        return _process_rows(rt, e, p, t0)
    state = PartitionStateManager(rt.state, p)
    state.begin(e.batch_id, _base_tokens(rt, e.batch_id))
    ctx = _context(rt, e, {}, state)
    child = s.children
    rows = rt.staging.get_table(e.batch_id, f"slice_{p}")
    s.children = [_Slice(child[0], rows)]
    try:
        output = rt.plan.root.execute(ctx)
        metrics = state.metrics(s.operator_id)
        ops = [_state_progress(_View(rt, state), op, ctx) for op in rt.plan.stateful_ops]
        versions = state.commit_all(e.batch_id)
        tokens = state.tokens()
    except BaseException:
        state.abort_all()
        raise
    finally:
        s.children = child
    state.release()
    if output.schema != rt.plan.output_schema and output.num_rows == 0:
        output = rt.plan.output_schema.empty_table()
    rt.staging.put_table(e.batch_id, f"output_{p}", output)
    info = PartitionResult(p, versions, tokens, ops, rows.num_rows, output.num_rows, metrics["num_rows_total"],
                           int((time.perf_counter() - t0) * 1000), BatchMetrics.of(ctx))
    rt.staging.put_json(e.batch_id, PartitionResult.name(p), info.to_json())
    return info


def _process_rows(rt: Any, e: Any, p: int, t0: float) -> PartitionResult:
    """Slice p of a stateless plan: the whole plan over slice p of every input."""
    inputs = {i: rt.staging.get_table(e.batch_id, f"slice_{p}_in{i}") for i in range(len(rt.sources))}
    ctx = _context(rt, e, inputs, rt.state)
    output = rt.plan.root.execute(ctx)
    if output.schema != rt.plan.output_schema and output.num_rows == 0:
        output = rt.plan.output_schema.empty_table()
    rt.staging.put_table(e.batch_id, f"output_{p}", output)
    info = PartitionResult(p, num_input_rows=sum(t.num_rows for t in inputs.values()), num_output_rows=output.num_rows,
                           process_ms=int((time.perf_counter() - t0) * 1000), metrics=BatchMetrics.of(ctx))
    rt.staging.put_json(e.batch_id, PartitionResult.name(p), info.to_json())
    return info


class _View:
    """What steps._state_progress reads of a runtime, with this partition's state manager."""

    def __init__(self, rt: Any, state: StateManager):
        self.state = state


def join_partitions(rt: Any, plan: Any) -> ProcessResult:
    """After every partition op: stage "output" and "process" as steps.process_batch would."""
    e = plan.entry
    split = SplitResult.load(rt.staging, e.batch_id)
    if split is None:
        raise RuntimeError(f"{rt.where(e.batch_id)}: the split after read has staged no result; run read and "
                           "split of this batch first")
    n = split.partitions
    loaded = [PartitionResult.load(rt.staging, e.batch_id, p) for p in range(n)]
    missing = [p for p, info in enumerate(loaded) if info is None]
    if missing:
        raise RuntimeError(f"{rt.where(e.batch_id)}: partitions {missing} have staged no result")
    parts = [info for info in loaded if info is not None]
    outputs = [rt.staging.get_table(e.batch_id, f"output_{p}") for p in range(n)]
    outputs = [o for o in outputs if o.num_rows] or [rt.plan.output_schema.empty_table()]
    rt.staging.put_table(e.batch_id, "output", pa.concat_tables(outputs, promote_options="default"))
    merged = BatchMetrics.merged(([split.metrics] if split.metrics else []) + [p.metrics for p in parts])
    tokens: dict[str, list] = {}
    for part in parts:
        for op_id, ts in part.state_tokens.items():
            cur = tokens.setdefault(op_id, [None] * n)
            cur[part.partition] = ts[part.partition]
    info = ProcessResult(
        event_time=merged.event_time, state_versions=parts[0].state_versions, state_tokens=tokens,
        next_timers={}, state_operators=(_merge_operators([p.state_operators for p in parts], merged)
                                         if parts[0].state_operators else []),
        warnings=merged.warnings, dead_letters=merged.dead_letters, static_versions=merged.static_versions,
        process_ms=split.split_ms + max(p.process_ms for p in parts),
        partitions=[p.summary() for p in parts], expectations=expectations_report(rt, merged.expectations))
    rt.staging.put_json(e.batch_id, ProcessResult.NAME, info.to_json())
    rt.emit("on_batch_step", e.batch_id, "process")
    return info


def _merge_operators(per_partition: list[list[dict[str, Any]]], merged: BatchMetrics) -> list[dict[str, Any]]:
    """Each operator's state metrics summed over partitions (numbers summed, the rest as reported)."""
    out: list[dict[str, Any]] = []
    for i, first in enumerate(per_partition[0]):
        op = dict(first)
        for k, v in first.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "num_partitions":
                op[k] = sum(ops[i].get(k, 0) for ops in per_partition)
        op["num_rows_dropped_by_watermark"] = merged.dropped_by_watermark.get(op["operator_id"], 0)
        out.append(op)
    return out

"""The batch protocol as five functions. Every runner (local, Dagster ops) calls these, in order.

    plan:    if the log has offsets[N] and no commits[N]: claim and redo exactly batch N
             else N = last + 1; end = each source's latest offset under its rate limit
                  nothing new and no time-based work -> None (nothing runs, nothing is written)
                  write offsets[N] = (start, end, W_N, W_{N-1}, per-input watermarks, timestamp)
    read:    rows in (start, end] of every source, staged as input_<i>
    process: operators over the staged rows; state loaded at N-1 (the tokens of commits[N-1]),
             committed as N under this attempt's tokens; output staged
    write:   sink.add_batch(N, output): idempotent per (query id, N)
    commit:  commits[N] (only while this runner owns offsets[N]) with the next watermark, the
             state tokens of N and the operators' next processing-time timers

The fence comes first: process and write refuse (ConcurrentRunError) unless this runner owns
offsets[N] (one read each), and commit is one atomic insert-if-owner. Plan starts from the log's
latest offsets and commit, or, in the runner that wrote the last commit itself, from that commit
as it stored it (BatchLog.latest_known: no read); either way the write-ahead insert of offsets[N]
fails if another runner wrote it, and this runner stops. A runner that lost the fence mid-step can
only have written files named by its own attempt (state tokens, staging under its run id), which
no commit row names, so the winner never reads them.

Each step returns its result as a dataclass of execution/step_results.py and stages it as JSON
("read", "process", "write"); commit reads them back, so the steps may run in separate processes.

A crash anywhere before commits[N] makes the next plan return the redo of N with the same offsets,
watermarks and timestamp; state restarts from N-1 and the sink skips or replaces batch N.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..checkpoint.log import CommitEntry, OffsetsEntry, barrier_message
from ..errors import ConcurrentRunError
from ..operators.base import BatchContext
from ..operators.expectations import declared
from ..redaction import logger as redacting_logger
from ..sql import run_sql
from ..watermark import format_ts_ms, next_watermarks
from .batch_sizing import plan_sizes
from .progress import build_progress
from .runtime import QueryRuntime
from .lineage import source_lineage
from .step_results import ProcessResult, ReadResult, SourceRead, WriteResult

log = redacting_logger("increments.batch")


@dataclass
class BatchPlan:
    entry: OffsetsEntry
    redo: bool
    planned_at: float
    durations_ms: dict[str, int]

    @property
    def batch_id(self) -> int:
        return self.entry.batch_id


def _ms(t0: float) -> int:
    return int(round((time.perf_counter() - t0) * 1000))


def plan_batch(rt: QueryRuntime, *, limited: bool = True) -> BatchPlan | None:
    """Decide the next batch from the log; write offsets[N] first (write-ahead). See module doc."""
    t0 = time.perf_counter()
    last_off, last_commit, _ = rt.log.latest_known()     # this runner's own last commit needs no read
    barrier = None
    if last_off is not None and last_off.barrier is not None and \
            (last_commit is None or last_commit.batch_id < last_off.batch_id):
        barrier, last_off = last_off, _before_barrier(rt, last_off)
    if last_off is not None and (last_commit is None or last_commit.batch_id < last_off.batch_id):
        entry = rt.log.claim_redo(last_off, rt.run_id)
        rt.emit("on_batch_step", entry.batch_id, "plan")
        return BatchPlan(entry, True, time.time(), {"latest_offset": _ms(t0), "wal_commit": 0})
    batch_id = last_off.batch_id + 1 if last_off else 0
    start = dict(last_off.end) if last_off else {str(i): s.initial_offset() for i, s in enumerate(rt.sources)}
    watermark = last_commit.next_watermark_ms if last_commit else 0
    late = last_off.watermark_ms if last_off else 0
    input_wms = dict(last_commit.next_input_watermarks_ms) if last_commit else {}
    sizes = plan_sizes(rt, last_off, last_commit)       # "auto" sources: recorded in offsets[N]
    end = {str(i): s.latest_offset(start[str(i)], limited) for i, s in enumerate(rt.sources)}
    latest_ms = _ms(t0)
    has_data = any(s.has_new_data(start[str(i)], end[str(i)]) for i, s in enumerate(rt.sources))
    now_ms = int(time.time() * 1000)
    if not has_data and not _time_based_work(rt, last_off, watermark, now_ms):
        return None
    entry = OffsetsEntry(batch_id, start, end, watermark, late, input_wms, now_ms,
                         {"state_partitions": rt.state.partitions, "state_store": rt.state.provider_name,
                          **({"batch_size": sizes} if sizes else {})})
    t1 = time.perf_counter()
    if barrier is not None:
        rt.log.take_over(barrier, entry, rt.run_id)
    else:
        rt.log.write_offsets(entry, rt.run_id)
    rt.emit("on_batch_step", batch_id, "plan")
    return BatchPlan(entry, False, time.time(), {"latest_offset": latest_ms, "wal_commit": _ms(t1)})


def _before_barrier(rt: QueryRuntime, barrier: OffsetsEntry) -> OffsetsEntry | None:
    """offsets[N] is a fence entry (`increments repartition` took the query's ownership there):
    this plan takes it over as batch N, planned from offsets[N-1] and commits[N-1] as usual --
    but only in a runner started with the partitions the command left (one started before it
    would run the old state: ConcurrentRunError, as for the cached runner whose insert fails)."""
    b = barrier.barrier or {}
    if b.get("to") is not None and int(b["to"]) != rt.state.partitions:
        raise ConcurrentRunError(barrier_message(rt.name, rt.query_id, barrier.batch_id, b, rt.run_id))
    return rt.log.get_offsets(barrier.batch_id - 1) if barrier.batch_id > 0 else None


def _time_based_work(rt: QueryRuntime, last_off: OffsetsEntry | None, watermark: int, now_ms: int) -> bool:
    """SEMANTICS.md rule 2: a no-data batch runs iff an operator evicts by watermark and the
    watermark moved past the one the last batch used; plus operators' own timers (processing time)."""
    if last_off is None:
        return False
    if rt.plan.has_watermark_eviction and watermark > last_off.watermark_ms:
        return True
    if any(op.has_time_based_work(watermark, now_ms) for op in rt.plan.stateful_ops):
        return True
    return any(t is not None and t <= now_ms for t in _next_timers(rt, last_off.batch_id).values())


def _next_timers(rt: QueryRuntime, batch_id: int) -> dict[str, int | None]:
    """The operators' earliest processing-time timers after batch `batch_id`, from its commit row
    (commits[N].extra["next_timers"]: {operator id: ms or None})."""
    ops = [op for op in rt.plan.stateful_ops if hasattr(op, "next_timer_ms")]
    if not ops:
        return {}
    c = rt.log.get_commit(batch_id)
    if c is None:
        return {}
    if "next_timers" in c.extra:
        return dict(c.extra["next_timers"] or {})
    out = {}    # committed by an earlier release: it kept the timer in state/<op>/_next_timer.json
    for op in ops:
        try:
            out[op.operator_id] = rt.state.checkpoint.read_json(f"state/{op.operator_id}/_next_timer.json") \
                .get("next_processing_timer_ms")
        except (FileNotFoundError, ValueError):
            pass
    return out


def check_owner(rt: QueryRuntime, batch_id: int, step: str) -> None:
    """The fence: ConcurrentRunError unless this runner (rt.run_id) still owns offsets[N]. (Another
    runner can only have committed N after claiming it, which makes it the owner.)"""
    owned = rt.log.offsets.owner(batch_id)
    if owned is None or owned[0] != rt.run_id:
        owner = f"run {owned[0]} (attempt {owned[1]})" if owned else "nobody"
        raise ConcurrentRunError(f"{rt.where(batch_id, step)}: offsets[{batch_id}] is owned by {owner}, not by run "
                                 f"{rt.run_id}; this run stops without touching state or the sink. Start only one "
                                 "runner per checkpoint.")


def _base_tokens(rt: QueryRuntime, batch_id: int) -> dict[str, list]:
    """The state tokens of version batch_id - 1: from this runner's own last commit, else the log."""
    if batch_id == 0 or not rt.plan.stateful_ops:
        return {}
    mine = rt.state.committed
    if mine is not None and mine[0] == batch_id - 1:
        return mine[1]
    c = rt.log.get_commit(batch_id - 1)
    return dict((c.extra.get("state_tokens") or {}) if c else {})


def load_plan(rt: QueryRuntime, batch_id: int) -> BatchPlan:
    """Re-load batch N's plan from the log, for a step that runs in another process than plan.

    Refuses (ConcurrentRunError) unless offsets[N] exists, commits[N] does not, and this runner
    (rt.run_id) owns offsets[N]: a stale or duplicate runner can never re-apply a batch. Runners that
    split the steps over processes stage the plan's durations as JSON "plan" (read back here).
    """
    entry = rt.log.get_offsets(batch_id)
    where = rt.where(batch_id)
    if entry is None:
        raise ConcurrentRunError(f"{where}: offsets[{batch_id}] is not in the log; plan the batch first")
    if rt.log.get_commit(batch_id) is not None:
        raise ConcurrentRunError(f"{where} is already committed; run {rt.run_id} refuses to apply it again")
    if entry.owner != rt.run_id:
        raise ConcurrentRunError(f"{where} is owned by run {entry.owner} (attempt {entry.attempt}), not by run "
                                 f"{rt.run_id}; this run stops without touching state or the sink")
    durations = rt.staging.get_json(batch_id, "plan", None) or {"latest_offset": 0, "wal_commit": 0}
    return BatchPlan(entry, entry.attempt > 1, time.time(), dict(durations))


def read_batch(rt: QueryRuntime, plan: BatchPlan) -> ReadResult:
    """Read (start, end] of every source and stage the rows; returns per-source row counts."""
    t0 = time.perf_counter()
    e = plan.entry
    sources: list[SourceRead] = []
    for i, src in enumerate(rt.sources):
        s, en = e.start[str(i)], e.end[str(i)]
        cols = rt.plan.scan_columns.get(i)
        if not src.has_new_data(s, en):
            table = src.schema().empty_table()
        elif cols is not None and src.reads_columns:
            table = src.read(s, en, columns=cols)
        else:
            table = src.read(s, en)
        rt.staging.put_table(e.batch_id, f"input_{i}", table)
        metrics = dict(getattr(src, "read_metrics", None) or {})
        metrics["lineage"] = source_lineage(src, s, en)       # what it read, for lineage (execution/lineage.py)
        sources.append(SourceRead(_scan_rows(rt, i, table), metrics))
    info = ReadResult(sources, _ms(t0))
    rt.staging.put_json(e.batch_id, ReadResult.NAME, info.to_json())
    rt.emit("on_batch_step", e.batch_id, "read")
    return info


def _scan_rows(rt: QueryRuntime, index: int, table: pa.Table) -> int:
    """Rows the source's scan produced: after the filters Spark would push into it (SEMANTICS.md rule 3)."""
    conjuncts = rt.plan.scan_filters.get(index)
    if not conjuncts or not table.num_rows:
        return table.num_rows
    where = " AND ".join(conjuncts)
    return run_sql(f"SELECT count(*) AS n FROM __scan WHERE {where}", {"__scan": table}).column(0)[0].as_py()


def process_batch(rt: QueryRuntime, plan: BatchPlan) -> ProcessResult:
    """Run the operators; commit every state store as version N (or abort all); stage the output."""
    t0 = time.perf_counter()
    e = plan.entry
    check_owner(rt, e.batch_id, "process")
    rt.state.begin(e.batch_id, _base_tokens(rt, e.batch_id))
    inputs = {i: rt.staging.get_table(e.batch_id, f"input_{i}") for i in range(len(rt.sources))}
    ctx = BatchContext(e.batch_id, e.watermark_ms, e.late_watermark_ms, e.timestamp_ms, inputs,
                       query_name=rt.name, query_id=rt.query_id, output_mode=rt.output_mode, state=rt.state)
    try:
        output = rt.plan.root.execute(ctx)
        if output.schema != rt.plan.output_schema and output.num_rows == 0:
            output = rt.plan.output_schema.empty_table()
        # metrics before the commit: a commit resets the stores' per-batch counters
        state_ops = [_state_progress(rt, op, ctx) for op in rt.plan.stateful_ops]
        versions = rt.state.commit_all(e.batch_id)
        tokens = rt.state.tokens()
    except BaseException:
        rt.state.abort_all()
        raise
    rt.state.release()
    rt.staging.put_table(e.batch_id, "output", output)
    info = ProcessResult(
        event_time={k: vars(v) for k, v in ctx.event_time.items()},
        state_versions=versions,
        state_tokens=tokens,
        next_timers={op.operator_id: op.next_timer_ms(e.batch_id) for op in rt.plan.stateful_ops
                     if hasattr(op, "next_timer_ms")},
        state_operators=state_ops,
        warnings=ctx.warnings,
        dead_letters=ctx.dead_letters,
        static_versions=ctx.static_versions,
        process_ms=_ms(t0),
        expectations=expectations_report(rt, ctx.expectations),
    )
    rt.staging.put_json(e.batch_id, ProcessResult.NAME, info.to_json())
    rt.emit("on_batch_step", e.batch_id, "process")
    return info


def expectations_report(rt: QueryRuntime, counted: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every expectation of the plan in declaration order with this batch's counts (zero for one no
    row reached); the plan's own condition and action, so a report of an earlier attempt cannot
    disagree with the running query."""
    return [{**e.report(0, 0), **{k: v for k, v in counted.get(e.name, {}).items() if k in ("passed", "failed")}}
            for e in declared(rt.plan.root)]


def _state_progress(rt: QueryRuntime, op: Any, ctx: BatchContext) -> dict[str, Any]:
    m = rt.state.metrics(op.operator_id)
    out = {"operator_name": op.operator_name, "operator_id": op.operator_id, **m,
           "num_rows_dropped_by_watermark": ctx.dropped_by_watermark.get(op.operator_id, 0),
           "num_partitions": rt.state.partitions}
    out.update(ctx.custom_metrics.get(op.operator_id, {}))
    return out


def write_batch(rt: QueryRuntime, plan: BatchPlan) -> WriteResult:
    """Hand the staged output to the sink; the sink makes the call idempotent per batch id."""
    t0 = time.perf_counter()
    check_owner(rt, plan.batch_id, "write")
    output = rt.staging.get_table(plan.batch_id, "output")
    result = rt.sink.add_batch(plan.batch_id, output)
    info = WriteResult(result.num_output_rows, result.version, result.skipped_replay, _ms(t0), dict(result.extra))
    rt.staging.put_json(plan.batch_id, WriteResult.NAME, info.to_json())
    rt.emit("on_batch_step", plan.batch_id, "write")
    return info


def commit_batch(rt: QueryRuntime, plan: BatchPlan) -> tuple[CommitEntry, dict[str, Any]]:
    """Write commits[N] with the watermark for N+1; then let sources clean up. Returns the entry
    and the batch's progress report.

    The step results are read back from staging (they may come from other processes); one that
    is missing counts as empty (step_results module doc: why), and the fenced insert decides."""
    t0 = time.perf_counter()
    e = plan.entry
    read = ReadResult.load(rt.staging, e.batch_id) or ReadResult()
    proc = ProcessResult.load(rt.staging, e.batch_id) or ProcessResult()
    write = WriteResult.load(rt.staging, e.batch_id) or WriteResult()
    stats = proc.event_time
    input_wms, next_wm = next_watermarks(e.input_watermarks_ms, stats, rt.plan.watermark_delays,
                                         rt.watermark_policy, e.watermark_ms)
    warnings = list(proc.warnings) + event_time_anomalies(rt, e, stats, next_wm)
    durations = dict(plan.durations_ms)
    durations.update(get_batch=read.get_batch_ms, add_batch=proc.process_ms + write.add_batch_ms)
    entry = CommitEntry(
        batch_id=e.batch_id, next_watermark_ms=next_wm, next_input_watermarks_ms=input_wms,
        num_input_rows=read.num_input_rows,
        num_output_rows=write.num_output_rows, state_versions=proc.state_versions,
        sink_version=write.sink_version, durations_ms=durations,
        event_time=stats, committed_at_ms=int(time.time() * 1000),
        extra={"state_operators": proc.state_operators, "sources": [s.to_json() for s in read.sources],
               "dead_letters": proc.dead_letters, "warnings": warnings,
               "attempt": e.attempt, "run_id": rt.run_id, "static_versions": proc.static_versions,
               "state_tokens": proc.state_tokens, "next_timers": proc.next_timers,
               **({"expectations": proc.expectations} if proc.expectations else {})})
    rt.log.write_commit(entry, rt.run_id)
    rt.state.committed = (e.batch_id, entry.extra["state_tokens"])
    entry.durations_ms["commit_offsets"] = _ms(t0)
    for i, src in enumerate(rt.sources):
        src.commit(e.end[str(i)])
    rt.staging.clear(e.batch_id)
    progress = build_progress(rt, plan, entry, read, proc)
    rt.emit("on_batch_step", e.batch_id, "commit")
    return entry, progress


FUTURE_SLACK_MS = 24 * 3600 * 1000


def event_time_anomalies(rt: QueryRuntime, e: OffsetsEntry, stats: dict[str, Any], next_wm: int) -> list[str]:
    """Warn (in progress and the log) when event times run more than a day ahead of the batch's
    processing time: such rows push the watermark forward and evict state that is still live."""
    out = []
    for wid, st in stats.items():
        mx = st.get("max_ms")
        if mx is not None and mx > e.timestamp_ms + FUTURE_SLACK_MS:
            msg = (f"{rt.where(e.batch_id)}: max event time {format_ts_ms(mx)} (watermark input {wid}) is ahead of the "
                   f"batch's processing time {format_ts_ms(e.timestamp_ms)} by more than a day; the next watermark is "
                   f"{format_ts_ms(next_wm)}, so state and windows before it are evicted (see num_rows_removed). If "
                   "these rows are bad input, filter them before with_watermark (e.g. where event_time <= now() + "
                   "INTERVAL 1 DAY).")
            log.warning("%s", msg)
            out.append(msg)
    return out


def run_one_batch(rt: QueryRuntime, *, limited: bool = True) -> dict[str, Any] | None:
    """plan -> read -> process -> write -> commit in this process; None when there is nothing to do."""
    plan = plan_batch(rt, limited=limited)
    if plan is None:
        return None
    read_batch(rt, plan)
    process_batch(rt, plan)
    write_batch(rt, plan)
    _, progress = commit_batch(rt, plan)
    return progress

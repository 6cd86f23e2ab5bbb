"""The engine side of a Dagster batch run (no dagster import here): runtimes, the refusal rule,
drains and the lineage record of a batch.

Refusal rule (what makes stale queued runs, UI re-executions and retries safe):
    next = N         if offsets[N] exists and commits[N] does not (a crash redo)
         = last + 1  otherwise (0 for a new query)
    a run asking for batch B (run tag increments/batch_id, or its parent run's when it is a
    re-execution) runs only if B == next; without B it runs `next`.
    Writing offsets[next] / claiming its redo is the fence when two runs plan at once.

Drains (AvailableNow): `start_drain` fixes each source's target in increments_drains; a batch run
with the drain restores the targets before planning; after each commit `drain_has_more` decides
whether the drain goes on or is done (no run is needed to find that out).
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable

_RUNTIMES: dict[tuple[str, str], Any] = {}


def build_runtime(writer_factory: Callable[[], Any], path: str | None, run_id: str | None = None,
                  staging: str = "disk") -> Any:
    """A QueryRuntime for this process; rt.run_id is the Dagster run id (the log's owner fence)."""
    writer = writer_factory()
    rt = writer.build(path, staging=staging)
    if run_id:
        rt.run_id = run_id
    return rt


def runtime_for_run(key: str, writer_factory: Callable[[], Any], path: str | None, run_id: str) -> Any:
    """One runtime per (query, run) and process: the ops of one run share it under the in-process
    executor; under a multiprocess executor each op process builds its own (staging is on disk)."""
    rt = _RUNTIMES.get((key, run_id))
    if rt is None:
        for k in [k for k in _RUNTIMES if k[0] == key]:
            release_run(*k)
        rt = _RUNTIMES[(key, run_id)] = build_runtime(writer_factory, path, run_id)
        from .celery_warm import reuse_provider  # noqa: PLC0415 - orchestration.celery_warm (deltalake, duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path
        reuse_provider(key, rt)          # a warm Celery worker: the previous run's open state stores
    return rt


def release_run(key: str, run_id: str) -> None:
    rt = _RUNTIMES.pop((key, run_id), None)
    if rt is not None:
        from .celery_warm import keep_provider  # noqa: PLC0415 - orchestration.celery_warm (deltalake, duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path
        keep_provider(key, rt)           # a warm Celery worker keeps the state provider for the next run
        close_quietly(rt)


def close_quietly(rt: Any) -> None:
    try:
        rt.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


def next_batch_id(rt: Any) -> tuple[int, bool]:
    """(the next uncommitted batch id, whether it is a redo of a planned batch)."""
    last_off = rt.log.latest_offsets()
    last_commit = rt.log.latest_commit()
    if last_off is not None and (last_commit is None or last_commit.batch_id < last_off.batch_id):
        return last_off.batch_id, last_off.barrier is None    # a fence entry (repartition) is planned anew
    return (last_commit.batch_id + 1 if last_commit else 0), False


def refusal(rt: Any, wanted: int | None, job: str = "the batch job") -> str | None:
    """Why a run asking for batch `wanted` must not run (None: it may): one line, what to launch instead."""
    if wanted is None:
        return None
    nxt, redo = next_batch_id(rt)
    if wanted == nxt:
        return None
    if wanted < nxt:
        return (f"batch {wanted} is committed (the next batch is {nxt}), so this run applies nothing; "
                f"launch {job} with no batch id to run batch {nxt}")
    return (f"batch {wanted} cannot run before batch {nxt}{' (a redo)' if redo else ''} is committed; "
            f"launch {job} with no batch id to run batch {nxt}")


def restore_drain(rt: Any, drain: Any) -> None:
    for i, src in enumerate(rt.sources):
        if str(i) in drain.targets:
            src.set_available_now_target(drain.targets[str(i)])


def drain_targets(rt: Any) -> dict[str, Any]:
    """Fix each source's AvailableNow target at what is available now (set on the sources too)."""
    targets = {}
    for i, src in enumerate(rt.sources):
        src.prepare_available_now()
        targets[str(i)] = src.available_now_target()
    return targets


def start_drain(rt: Any) -> tuple[Any, bool]:
    """The active drain, or a new one with the targets available now; (drain, created)."""
    from increments.checkpoint.drains import DrainLog  # noqa: PLC0415 - increments.checkpoint.drains (sqlalchemy): kept off the code location's import path
    drains = DrainLog.for_runtime(rt)
    cur = drains.active()
    if cur is not None:
        return cur, False
    return drains.start(drain_targets(rt))


def drain_has_more(rt: Any, drain: Any) -> bool:
    """After a commit: is there anything left under the drain's targets (data or time-based work)?"""
    restore_drain(rt, drain)
    return pending_work(rt, probe=True)


def pending_work(rt: Any, probe: bool = False) -> bool:
    """Is there a batch to run: a redo, new data, or time-based work (SEMANTICS.md rule 2)?

    probe=False (sensors, no run owns the query): via each source's backlog(); a source that cannot
    tell (backlog() is None, e.g. a Delta table) is asked for its latest offset, which for such
    sources only reads (a Delta table's log), so a sensor does not launch a run that finds nothing
    every interval. probe=True (inside the run that owns the query): asks each source for its
    latest offset, as the next plan would.
    """
    from increments.execution import steps  # noqa: PLC0415 - increments.execution.steps (deltalake, duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path
    last_off = rt.log.latest_offsets()
    last_commit = rt.log.latest_commit()
    if last_off is not None and last_off.barrier is None and \
            (last_commit is None or last_commit.batch_id < last_off.batch_id):
        return True
    # (a fence entry before any batch has no offsets: the sources' initial ones)
    start = dict(last_off.end) if last_off and last_off.end else {str(i): s.initial_offset()
                                                                  for i, s in enumerate(rt.sources)}
    for i, src in enumerate(rt.sources):
        s = start[str(i)]
        if probe:
            if src.has_new_data(s, src.latest_offset(s, True)):
                return True
            continue
        backlog = src.backlog(s)
        if backlog is None:
            try:
                if src.has_new_data(s, src.latest_offset(s, True)):
                    return True
            except Exception:  # noqa: BLE001 - cannot tell: let a run find out
                return True
            continue
        if any(isinstance(v, (int, float)) and v > 0 for v in backlog.values()):
            return True
    watermark = last_commit.next_watermark_ms if last_commit else 0
    return steps._time_based_work(rt, last_off, watermark, int(time.time() * 1000))


def changed_since_read(rt: Any) -> list[tuple[bool, str]]:
    """Input the committed batches read that changed since (a file that grew or was rewritten),
    side-effect free, for the trigger sensor when there is no new data: (fails, message) per change,
    `fails` when the next plan fails on it (Source.changed_since_read)."""
    last_off = rt.log.latest_offsets()
    if last_off is None or not last_off.end:
        return []
    out = []
    for i, src in enumerate(rt.sources):
        for fails, msg in src.changed_since_read(last_off.end.get(str(i))):
            out.append((fails, src.fail(msg)))
    return out


def offsets_text(entry: Any) -> str:
    """'0: -1 -> 3; 1: {...} -> {...}' (compact, for tags and tables)."""
    parts = []
    for k in sorted(entry.start, key=lambda x: int(x)):
        parts.append(f"{k}: {json.dumps(entry.start[k], separators=(',', ':'))} -> "
                     f"{json.dumps(entry.end.get(k), separators=(',', ':'))}")
    return "; ".join(parts)


def lineage(rt: Any, plan: Any, commit: Any, progress: dict[str, Any]) -> dict[str, Any]:
    """The batch's lineage record (plain values; the op turns it into Dagster metadata)."""
    e = plan.entry
    sources = []
    for i, src in enumerate(rt.sources):
        ps = progress["sources"][i] if i < len(progress["sources"]) else {}
        sources.append({"index": i, "description": src.description, "start": e.start[str(i)],
                        "end": e.end[str(i)], "num_input_rows": ps.get("num_input_rows", 0)})
    state_rows = sum(int(op.get("num_rows_total", 0) or 0) for op in commit.extra.get("state_operators", []))
    return {
        "query": rt.name, "query_id": rt.query_id, "batch_id": e.batch_id, "attempt": e.attempt, "redo": plan.redo,
        "offsets": offsets_text(e), "sources": sources,
        "num_input_rows": commit.num_input_rows, "num_output_rows": commit.num_output_rows,
        "watermark_ms": e.watermark_ms, "next_watermark_ms": commit.next_watermark_ms,
        "state_versions": commit.state_versions, "state_rows_total": state_rows,
        "sink": rt.sink.description, "sink_version": commit.sink_version,
        "durations_ms": dict(progress.get("duration_ms", {})),
        "input_rows_per_second": progress.get("input_rows_per_second", 0.0),
        "processed_rows_per_second": progress.get("processed_rows_per_second", 0.0),
        "batch_timestamp_ms": e.timestamp_ms, "committed_at_ms": commit.committed_at_ms,
    }

"""Progress reports: one dict per batch, with the fields API.md lists (Spark's names in snake_case).
Source and sink descriptions are redacted (they may name URLs with credentials)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..storage import redact
from ..watermark import format_ts_ms
from .step_results import ProcessResult, ReadResult

if TYPE_CHECKING:
    from ..checkpoint.log import CommitEntry
    from .runtime import QueryRuntime
    from .steps import BatchPlan


def build_progress(rt: QueryRuntime, plan: BatchPlan, entry: CommitEntry, read: ReadResult,
                   proc: ProcessResult) -> dict[str, Any]:
    """Batch N's progress dict, from its commit entry (durations, rows, watermarks, warnings) and
    the read and process results it was committed from (per-source rows and metrics, state
    operators, dead letters). Records the batch's start in rt for the next report's input rate."""
    e = plan.entry
    d = entry.durations_ms
    trigger_ms = sum(d.get(k, 0) for k in ("latest_offset", "wal_commit", "get_batch", "add_batch", "commit_offsets"))
    d["trigger_execution"] = trigger_ms
    n_in = entry.num_input_rows
    last_start = getattr(rt, "_last_trigger_start_ms", None)
    rt._last_trigger_start_ms = e.timestamp_ms
    elapsed_s = (e.timestamp_ms - last_start) / 1000 if last_start and e.timestamp_ms > last_start else None
    in_rate = n_in / elapsed_s if elapsed_s else 0.0
    proc_rate = n_in / (trigger_ms / 1000) if trigger_ms else 0.0
    event_time: dict[str, Any] = {}
    if rt.plan.watermark_delays:
        event_time["watermark"] = format_ts_ms(e.watermark_ms)
        if e.watermark_ms and e.watermark_ms > 0:      # how far event time trails the batch's clock
            event_time["watermark_lag_ms"] = int(e.timestamp_ms - e.watermark_ms)
        stats = [s for s in (entry.event_time or {}).values() if s.get("count")]
        if stats:
            event_time["max"] = format_ts_ms(max(s["max_ms"] for s in stats))
            event_time["min"] = format_ts_ms(min(s["min_ms"] for s in stats))
            event_time["avg"] = format_ts_ms(int(sum(s["sum_ms"] for s in stats) / sum(s["count"] for s in stats)))
    sources = []
    for i, src in enumerate(rt.sources):
        rs = read.sources[i] if i < len(read.sources) else None
        n = rs.num_input_rows if rs else 0
        sources.append({
            "description": redact(src.description), "start_offset": e.start[str(i)], "end_offset": e.end[str(i)],
            "latest_offset": e.end[str(i)], "num_input_rows": n,
            "input_rows_per_second": n / elapsed_s if elapsed_s else 0.0,
            "processed_rows_per_second": n / (trigger_ms / 1000) if trigger_ms else 0.0,
            **(rs.metrics if rs else {}),
        })
    return {
        "id": rt.query_id, "run_id": rt.run_id, "name": rt.name, "batch_id": e.batch_id,
        "timestamp": format_ts_ms(e.timestamp_ms), "num_input_rows": n_in,
        "input_rows_per_second": in_rate, "processed_rows_per_second": proc_rate,
        "duration_ms": {k: d.get(k, 0) for k in ("trigger_execution", "latest_offset", "get_batch", "add_batch",
                                                 "wal_commit", "commit_offsets")},
        "event_time": event_time,
        "state_operators": proc.state_operators,
        "sources": sources,
        "sink": {"description": redact(rt.sink.description), "num_output_rows": entry.num_output_rows,
                 "version": entry.sink_version},
        "watermark_ms": e.watermark_ms, "next_watermark_ms": entry.next_watermark_ms,
        "redo": plan.redo, "attempt": e.attempt,
        "dead_letters": proc.dead_letters, "warnings": entry.extra["warnings"],
        "expectations": proc.expectations,
    }

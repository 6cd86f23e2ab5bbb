"""Health rules of a streaming query, evaluated from its batch log (no dagster import here).

Each rule returns (passed, metadata, description). The commit op records them per batch as asset
check evaluations on the sink; the asset checks re-evaluate them on demand from the log.

- processed_rate: rows/s processed (input rows / batch execution time) >= rows/s arriving (input
  rows / time since the previous batch). Falling behind means the backlog grows.
- batch_duration: the batch's execution time < the processing-time trigger interval (a batch that
  overruns delays the next one). AvailableNow/once queries pass.
- state_rows: total state rows <= option max_state_rows (passes, with the figure, when unset); the
  metadata also has each stateful operator's rows and state memory (`memory_used_bytes[<id>:<name>]`).
- kafka_lag: records available beyond the batch's end offsets <= option max_kafka_lag (passes when
  the query reads no Kafka source or the option is unset).
- watermark_lag: the batch's timestamp minus the event-time watermark it ran with (how far event
  time trails the wall clock) <= option max_watermark_lag (a duration string, e.g. "15 minutes");
  passes when unset or when the query has no watermark (or none yet).
Unset thresholds and unknown figures are left out of the metadata (never shown as -1).

Rules apply where they can (`applicable_rules`): kafka_lag only to a query reading a Kafka
source, watermark_lag only to a query with an event-time watermark; `evaluate` returns the
applicable rules only, and orchestration/checks.py defines a check per applicable rule.
"""
from __future__ import annotations

from typing import Any

from increments.durations import parse_duration_ms
from increments.watermark import format_ts_ms

RULES = ("processed_rate", "batch_duration", "state_rows", "kafka_lag", "watermark_lag")


def applicable_rules(has_kafka: bool, has_watermark: bool) -> tuple[str, ...]:
    """The rules that can say something about a query (module doc)."""
    return tuple(r for r in RULES if (r != "kafka_lag" or has_kafka) and (r != "watermark_lag" or has_watermark))


def rules_for(rt: Any) -> tuple[str, ...]:
    """applicable_rules of the query behind runtime `rt`."""
    return applicable_rules(any("kafka" in type(s).__name__.lower() for s in rt.sources),
                            bool(rt.plan.watermark_delays))


def _exec_ms(commit: Any) -> int:
    d = commit.durations_ms or {}
    if d.get("trigger_execution"):
        return int(d["trigger_execution"])
    return int(sum(d.get(k, 0) for k in ("latest_offset", "wal_commit", "get_batch", "add_batch", "commit_offsets")))


def evaluate(rt: Any, batch_id: int | None = None) -> dict[str, tuple[bool, dict[str, Any], str]]:
    """The applicable rules for batch `batch_id` (default: the last committed one)."""
    rules = rules_for(rt)
    commit = rt.log.get_commit(batch_id) if batch_id is not None else rt.log.latest_commit()
    if commit is None:
        return {r: (True, {}, "no committed batch yet") for r in rules}
    off = rt.log.get_offsets(commit.batch_id)
    prev = rt.log.get_offsets(commit.batch_id - 1) if commit.batch_id > 0 else None
    opts = rt.options                      # checked and typed (increments/options.py)
    out: dict[str, tuple[bool, dict[str, Any], str]] = {}
    n = commit.num_input_rows
    ex_ms = max(_exec_ms(commit), 1)
    processed = n / (ex_ms / 1000)
    gap_s = (off.timestamp_ms - prev.timestamp_ms) / 1000 if (off and prev and off.timestamp_ms > prev.timestamp_ms) else None
    arriving = n / gap_s if gap_s else 0.0
    out["processed_rate"] = (processed >= arriving or n == 0,
                             {"batch_id": commit.batch_id, "processed_rows_per_second": round(processed, 3),
                              "input_rows_per_second": round(arriving, 3)},
                             "processed rows/s >= input rows/s")
    trig = rt.settings.trigger
    interval = trig.interval_ms if trig.kind == "processing_time" else 0
    out["batch_duration"] = (not interval or ex_ms < interval,
                             {"batch_id": commit.batch_id, "batch_duration_ms": ex_ms,
                              **({"trigger_interval_ms": interval} if interval else {})},
                             "batch duration < trigger interval")
    ops = commit.extra.get("state_operators", []) or []
    rows = sum(int(op.get("num_rows_total", 0) or 0) for op in ops)
    per_op: dict[str, Any] = {}
    for op in ops:
        who = f"{op.get('operator_id', '?')}:{op.get('operator_name', '?')}"
        per_op[f"state_rows[{who}]"] = int(op.get("num_rows_total", 0) or 0)
        if op.get("memory_used_bytes") is not None:
            per_op[f"memory_used_bytes[{who}]"] = int(op["memory_used_bytes"])
    if ops:
        per_op["state_memory_used_bytes"] = sum(int(op.get("memory_used_bytes", 0) or 0) for op in ops)
    limit = opts.get("max_state_rows")
    out["state_rows"] = (limit is None or rows <= int(limit),
                         {"batch_id": commit.batch_id, "state_rows_total": rows, **per_op,
                          **({"max_state_rows": int(limit)} if limit is not None else {})},
                         "state rows within max_state_rows" if limit is not None else "max_state_rows is not set")
    lag = _kafka_lag(rt, off)
    lag_limit = opts.get("max_kafka_lag")
    out["kafka_lag"] = (lag is None or lag_limit is None or lag <= int(lag_limit),
                        {"batch_id": commit.batch_id, **({"kafka_lag": lag} if lag is not None else {}),
                         **({"max_kafka_lag": int(lag_limit)} if lag_limit is not None else {})},
                        "Kafka records behind the batch's end offsets within max_kafka_lag" if lag_limit is not None
                        else "max_kafka_lag is not set")
    out["watermark_lag"] = _watermark_lag(rt, commit.batch_id, off, opts.get("max_watermark_lag"))
    for _, meta, _ in out.values():        # an identifier, not a metric: text, so the UI does not plot it
        if "batch_id" in meta:
            meta["batch_id"] = str(meta["batch_id"])
    return {r: v for r, v in out.items() if r in rules}


def watermark_lag_ms(timestamp_ms: int, watermark_ms: int | None) -> int | None:
    """How far the event-time watermark trails the batch's timestamp; None without a watermark yet."""
    if not watermark_ms or watermark_ms <= 0:
        return None
    return int(timestamp_ms - watermark_ms)


def _watermark_lag(rt: Any, batch_id: int, off: Any, limit_text: Any) -> tuple[bool, dict[str, Any], str]:
    limit = parse_duration_ms(limit_text) if limit_text is not None else None
    lag = watermark_lag_ms(off.timestamp_ms, off.watermark_ms) if (off is not None and rt.plan.watermark_delays) else None
    meta: dict[str, Any] = {"batch_id": batch_id}
    if lag is not None:
        meta.update(watermark=format_ts_ms(off.watermark_ms), batch_timestamp=format_ts_ms(off.timestamp_ms),
                    watermark_lag_ms=lag)
    if limit is not None:
        meta["max_watermark_lag_ms"] = limit
    if not rt.plan.watermark_delays:
        desc = "the query has no watermark"
    elif lag is None:
        desc = "no watermark yet (no event time seen)"
    elif limit is None:
        desc = "max_watermark_lag is not set"
    else:
        desc = "batch timestamp - watermark within max_watermark_lag"
    return (lag is None or limit is None or lag <= limit, meta, desc)


def _kafka_lag(rt: Any, off: Any) -> int | None:
    if off is None:
        return None
    total, known = 0, False
    for i, src in enumerate(rt.sources):
        if "kafka" not in type(src).__name__.lower():
            continue
        try:
            b = src.backlog(off.end[str(i)])
        except Exception:  # noqa: BLE001 - lag is advisory
            b = None
        if b is None:       # the source cannot tell its lag cheaply
            continue
        known = True
        total += int(sum(v for v in b.values() if isinstance(v, (int, float))))
    return total if known else None

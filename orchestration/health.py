"""Health rules of a streaming query, evaluated from its batch log (no dagster import here).

Each rule returns (passed, metadata, description). The commit op records them per batch as asset
check evaluations on the sink; the asset checks re-evaluate them on demand from the log.

- processed_rate: rows/s processed (input rows / batch execution time) >= rows/s arriving (input
  rows / time since the previous batch). Falling behind means the backlog grows.
- batch_duration: the batch's execution time < the processing-time trigger interval (a batch that
  overruns delays the next one). AvailableNow/once queries pass.
- state_rows: total state rows <= option max_state_rows (passes, with the figure, when unset).
- kafka_lag: records available beyond the batch's end offsets <= option max_kafka_lag (passes when
  the query reads no Kafka source or the option is unset).
Unset thresholds and unknown figures are left out of the metadata (never shown as -1).
"""
from __future__ import annotations

from typing import Any

RULES = ("processed_rate", "batch_duration", "state_rows", "kafka_lag")


def _exec_ms(commit: Any) -> int:
    d = commit.durations_ms or {}
    if d.get("trigger_execution"):
        return int(d["trigger_execution"])
    return int(sum(d.get(k, 0) for k in ("latest_offset", "wal_commit", "get_batch", "add_batch", "commit_offsets")))


def evaluate(rt: Any, batch_id: int | None = None) -> dict[str, tuple[bool, dict[str, Any], str]]:
    """All rules for batch `batch_id` (default: the last committed one)."""
    commit = rt.log.get_commit(batch_id) if batch_id is not None else rt.log.latest_commit()
    if commit is None:
        return {r: (True, {}, "no committed batch yet") for r in RULES}
    off = rt.log.get_offsets(commit.batch_id)
    prev = rt.log.get_offsets(commit.batch_id - 1) if commit.batch_id > 0 else None
    opts = rt.settings.options
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
    rows = sum(int(op.get("num_rows_total", 0) or 0) for op in commit.extra.get("state_operators", []))
    limit = opts.get("max_state_rows")
    out["state_rows"] = (limit is None or rows <= int(limit),
                         {"batch_id": commit.batch_id, "state_rows_total": rows,
                          **({"max_state_rows": int(limit)} if limit is not None else {})},
                         "state rows within max_state_rows" if limit is not None else "max_state_rows is not set")
    lag = _kafka_lag(rt, off)
    lag_limit = opts.get("max_kafka_lag")
    out["kafka_lag"] = (lag is None or lag_limit is None or lag <= int(lag_limit),
                        {"batch_id": commit.batch_id, **({"kafka_lag": lag} if lag is not None else {}),
                         **({"max_kafka_lag": int(lag_limit)} if lag_limit is not None else {})},
                        "Kafka records behind the batch's end offsets within max_kafka_lag" if lag_limit is not None
                        else "max_kafka_lag is not set")
    return out


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

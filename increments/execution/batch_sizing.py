"""Adaptive batch sizing: `max_files_per_trigger="auto"` / `max_offsets_per_trigger="auto"` with
`.option("target_batch_duration", "30 seconds")` (default 30 seconds).

The plan step sizes each "auto" source's next batch from the log's history, then writes the chosen
size into offsets[N].conf["batch_size"] ({source index: size}) beside the end offsets. A redo of
batch N reads exactly offsets[N]'s range and never re-sizes; batch N+1 is sized from offsets[N]'s
size and commits[N]'s duration:

    no history (batch 0, or a checkpoint from before "auto")   -> INITIAL (1 file, 1000 offsets)
    d = commits[N]'s duration (plan + read + process + write + commit, ms), s = offsets[N]'s size
    d > target (a slow batch)                                  -> back off: s * target / d * BACKOFF
    the batch was full (read s units) and d <= target          -> grow toward s * target / d,
                                                                  at most GROWTH (8) x s: a
                                                                  batch that took <= 1/8 of the
                                                                  target is 8x bigger, so a
                                                                  backlog reaches full-size batches
                                                                  in a few batches (1, 8, 64, ...)
    the batch was not full (the backlog ran out)               -> keep s (an idle stream does not
                                                                  grow the size without bound)
Sizes are at least 1. Units: files for the file and Delta sources (the read step reports the
files it read as read_metrics["files"]; a source that does not is taken as full), offsets for
Kafka (its rows are its offsets). The duration is the work of the batch, not a Dagster run's
launch overhead, so the size is the same under every runner.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from ..durations import parse_duration_ms

DEFAULT_TARGET = "30 seconds"
INITIAL = {"files": 1, "offsets": 1000}
GROWTH = 8.0
BACKOFF = 0.8


def mark_auto(source: Any, unit: str, attribute: str) -> Any:
    """Make `source` size its batches adaptively: the planner sets `source.<attribute>` (the
    source's own limit, e.g. max_files_per_trigger) before each latest_offset call."""
    source.auto_batch = (unit, attribute)
    return source


def target_ms(options: Mapping[str, Any]) -> int:
    """The option target_batch_duration in ms (an increments.options.Options: checked positive there)."""
    return parse_duration_ms(options["target_batch_duration"] or DEFAULT_TARGET)


def next_size(unit: str, prev: int | None, duration_ms: int | None, target: int, full: bool = True) -> int:
    """The next batch's size from the previous one's size and duration (see module doc)."""
    if prev is None or duration_ms is None:
        return INITIAL[unit]
    d = max(int(duration_ms), 1)
    if d > target:
        return max(1, math.floor(prev * target / d * BACKOFF))
    if not full:
        return prev
    return max(1, min(math.floor(prev * target / d), math.floor(prev * GROWTH)), prev)


def _units_read(commit: Any, index: int, unit: str) -> int | None:
    srcs = (commit.extra or {}).get("sources") or []
    if index >= len(srcs):
        return None
    s = srcs[index]
    return s.get("num_input_rows") if unit == "offsets" else s.get("files")


def plan_sizes(rt: Any, last_off: Any, last_commit: Any) -> dict[str, int]:
    """Set the limit of every "auto" source for the batch being planned; returns {index: size}
    for offsets[N].conf["batch_size"] (empty when no source is "auto")."""
    auto = [(i, s) for i, s in enumerate(rt.sources) if getattr(s, "auto_batch", None)]
    if not auto:
        return {}
    target = target_ms(rt.options)
    prev_sizes = (last_off.conf or {}).get("batch_size", {}) if last_off is not None else {}
    done = last_commit is not None and last_off is not None and last_commit.batch_id == last_off.batch_id
    duration = sum((last_commit.durations_ms or {}).values()) if done else None
    sizes = {}
    for i, src in auto:
        unit, attr = src.auto_batch
        prev = prev_sizes.get(str(i))
        read = _units_read(last_commit, i, unit) if done else None
        size = next_size(unit, prev, duration, target, full=read is None or prev is None or read >= prev)
        setattr(src, attr, size)
        sizes[str(i)] = size
    return sizes

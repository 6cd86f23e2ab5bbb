"""Event-time watermarks, exactly as Spark's WatermarkTracker (SEMANTICS.md rule 3).

After batch b, for each watermark node i with rows in b: candidate = max event time (ms) - delay;
the node's watermark becomes the candidate if it had none yet or the candidate is greater. A
node that has seen no data yet counts as 0 (the epoch). The global watermark is the min over
nodes (the `max` policy takes the max) and never decreases. W_0 = 0.

Unlike Spark, the per-node watermarks are persisted in commits[N], so a restart does not forget
them (Spark restores only the global value).
"""
from __future__ import annotations

import datetime as dt
from typing import Any


def next_watermarks(input_wms: dict[str, int], stats: dict[str, dict[str, Any]], delays: dict[str, int],
                     policy: str, current_ms: int) -> tuple[dict[str, int], int]:
    if not delays:
        return {}, current_ms
    new = dict(input_wms)
    for wid, delay in delays.items():
        s = stats.get(wid) or {}
        if s.get("count", 0) > 0 and s.get("max_ms") is not None:
            cand = int(s["max_ms"]) - delay
            if wid not in new or cand > new[wid]:
                new[wid] = cand
        elif wid not in new:
            new[wid] = 0
    values = [new[w] for w in delays]
    chosen = max(values) if policy == "max" else min(values)
    return new, max(current_ms, chosen)


def format_ts_ms(ms: int | None) -> str | None:
    """Spark's progress format for instants: 2024-01-01T10:45:00.000Z."""
    if ms is None:
        return None
    t = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"

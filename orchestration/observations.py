"""Observations of a query's source assets: the backlog the query has not read yet and the
source's data version, so the asset graph shows new data waiting.

    files   files_pending: files listed after the last one read; data version: the newest
            file name available
    kafka   offsets_pending (the Kafka lag) and per_partition; data version: a digest of the
            broker's end offsets
    delta   versions_behind: table versions not fully read; data version: the table's version
    other   the source's backlog() figures, when it can tell; no data version

`source_state(rt)` is the engine side (no dagster import); `observation_events` turns it into
AssetObservations (metadata `reader` = the query, the figures; tag dagster/data_version), emitted by
the `<q>_freshness` sensor (freshness.py) when a figure or a data version changed. Side-effect
free: only listings and the broker's ends are asked, nothing is planned.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any


def _end_offsets(rt: Any) -> dict[str, Any]:
    last = rt.log.latest_commit()
    off = rt.log.get_offsets(last.batch_id) if last is not None else None
    if off is not None and off.end:
        return dict(off.end)
    return {str(i): s.initial_offset() for i, s in enumerate(rt.sources)}


def source_state(rt: Any) -> list[dict[str, Any]]:
    """Per source (index order): {"backlog": {...}, "data_version": str | None} ({"error": ...}
    when the source could not tell)."""
    ends = _end_offsets(rt)
    out = []
    for i, src in enumerate(rt.sources):
        try:
            out.append(_one(src, ends.get(str(i))))
        except Exception as e:  # noqa: BLE001 - an observation is advisory
            out.append({"backlog": {}, "data_version": None, "error": f"{type(e).__name__}: {e}"[:300]})
    return out


def _one(src: Any, end: Any) -> dict[str, Any]:
    kind = type(src).__name__.lower()
    if "file" in kind and hasattr(src, "list_after") and getattr(src, "_log", None) is not None:
        last = src._log.last(end, src._rel) if end is not None and int(end) >= 0 else None
        pending = src.list_after(last)
        newest = pending[-1].name if pending else last
        return {"backlog": {"files_pending": len(pending)}, "data_version": newest or None}
    if "kafka" in kind:
        b = src.backlog(end) or {}
        per = b.get("per_partition") or {}
        ends = {tp: n + int((end or {}).get(tp.rsplit("/", 1)[0], {}).get(tp.rsplit("/", 1)[1], 0) or 0)
                for tp, n in per.items()}
        digest = hashlib.sha1(json.dumps(ends, sort_keys=True).encode()).hexdigest()[:16]
        return {"backlog": {"offsets_pending": int(b.get("offsets_pending", 0)), "per_partition": per},
                "data_version": digest}
    if "delta" in kind and hasattr(src, "_latest_version"):
        latest = int(src._latest_version())
        v, i = int(end["version"]), int(end["index"])
        behind = 0 if v > latest else latest - v + (0 if i >= len(src._commit_adds(v)) else 1)
        return {"backlog": {"versions_behind": behind, "table_version": latest}, "data_version": str(latest)}
    b = src.backlog(end)
    return {"backlog": dict(b) if b else {}, "data_version": None}


def source_keys_by_index(spec: Any, rt: Any) -> list[list[Any]]:
    """spec.source_assets split per source (a Kafka source has one asset per topic)."""
    keys = spec.source_keys()
    out, pos = [], 0
    for src in rt.sources:
        topics = getattr(src, "topics", None) if "kafka" in type(src).__name__.lower() else None
        n = len(topics) if topics else 1
        out.append(keys[pos:pos + n])
        pos += n
    return out


def observation_events(spec: Any, rt: Any, materialized: set | None = None) -> list[Any]:
    """AssetObservations of the query's sources (module doc). A source asset some query of the
    location materializes (`materialized`) gets the backlog but no data version (its
    materializations carry its versions)."""
    import dagster as dg
    from .dagster_internals import DATA_VERSION_TAG
    events = []
    for keys, st in zip(source_keys_by_index(spec, rt), source_state(rt)):
        for key in keys:
            md: dict[str, Any] = {"reader": spec.name}
            for k, v in st["backlog"].items():
                md[k] = dg.MetadataValue.json(v) if isinstance(v, (dict, list)) else v
            if st.get("error"):
                md["error"] = st["error"]
            tags = ({DATA_VERSION_TAG: st["data_version"]}
                    if st.get("data_version") and key not in (materialized or set()) else None)
            pending = {k: v for k, v in st["backlog"].items() if isinstance(v, int) and k != "table_version"}
            events.append(dg.AssetObservation(
                asset_key=key, metadata=md, tags=tags,
                description=f"{spec.name}: " + (", ".join(f"{k} {v}" for k, v in pending.items()) or "caught up")))
    return events


def fingerprint(events: list[Any]) -> str:
    """What makes two ticks' observations the same (so unchanged ones are not re-emitted)."""
    parts = []
    for e in events:
        md = {k: getattr(v, "value", v) for k, v in e.metadata.items()}
        parts.append([e.asset_key.to_user_string(), md, dict(e.tags or {})])
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

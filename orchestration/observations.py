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

Staleness: a batch's sink materialization records, per source asset, the data version of what the
batch read (`read_version`: the last file read, the digest of the end offsets read, the last Delta
version read whole) as its input data version (`provenance_tags`), in the same terms as the
observations. So the asset graph shows the sink "Unsynced" exactly while a source holds data the
query has not read, and in sync once it caught up. A Delta sink's materialization carries the
table version as its data version (`sink_data_version`), which is what a Delta source reading that
table records, so silver is in sync with bronze once it read bronze's last version. The input of
another query's non-Delta sink keeps Dagster's own provenance (its versions are Dagster's).
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import dagster as dg

from increments.redaction import redact

from . import runner
from .assets import _part
from .dagster_internals import DATA_VERSION_TAG, get_input_data_version_tag


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
            out.append({"backlog": {}, "data_version": None, "error": redact(f"{type(e).__name__}: {e}")[:300]})
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
        highs: dict[str, dict[str, int]] = {}        # the broker's end offsets: what a caught-up batch read to
        for tp, n in per.items():
            t, p = tp.rsplit("/", 1)
            highs.setdefault(t, {})[p] = n + int((end or {}).get(t, {}).get(p, 0) or 0)
        return {"backlog": {"offsets_pending": int(b.get("offsets_pending", 0)), "per_partition": per},
                "data_version": _kafka_version(highs), "data_versions": {t: _kafka_version({t: v})
                                                                       for t, v in highs.items()}}
    if "delta" in kind and hasattr(src, "_latest_version"):
        latest = int(src._latest_version())
        v, i = int(end["version"]), int(end["index"])
        behind = 0 if v > latest else latest - v + (0 if i >= len(src._commit_adds(v)) else 1)
        return {"backlog": {"versions_behind": behind, "table_version": latest}, "data_version": str(latest)}
    b = src.backlog(end)
    return {"backlog": dict(b) if b else {}, "data_version": None}


def _kafka_version(offsets: dict[str, dict[str, Any]]) -> str:
    """The data version of Kafka topics at these offsets ({topic: {partition: offset}})."""
    flat = {f"{t}/{p}": int(o) for t, ps in offsets.items() for p, o in ps.items()}
    return hashlib.sha1(json.dumps(flat, sort_keys=True).encode()).hexdigest()[:16]


def read_version(src: Any, end: Any) -> dict[str | None, str] | None:
    """The data version of what a batch read up to `end` (its end offset), in the terms of the
    source's observations: {None: version} or, for Kafka, {topic: version}; None when unknown."""
    kind = type(src).__name__.lower()
    try:
        if "file" in kind and getattr(src, "_log", None) is not None:
            last = src._log.last(int(end), src._rel) if end is not None and int(end) >= 0 else None
            return {None: last} if last else None
        if "kafka" in kind and isinstance(end, dict):
            return {t: _kafka_version({t: ps}) for t, ps in end.items()}
        if "delta" in kind and isinstance(end, dict) and "index" in end and hasattr(src, "_commit_adds"):
            v, i = int(end["version"]), int(end["index"])
            whole = v if i >= len(src._commit_adds(v)) else v - 1
            return {None: str(whole)} if whole >= 0 else None
    except Exception:  # noqa: BLE001 - provenance is advisory
        return None
    return None


def _has_version(instance: Any, key: Any) -> bool:
    """Has the asset a data version on this instance (an observation or a materialization)? One
    never observed has Dagster's initial version, which a batch's provenance must then keep."""
    if instance is None:
        return True
    try:
        return bool(instance.fetch_observations(key, limit=1).records) or \
            instance.get_latest_materialization_event(key) is not None
    except Exception:  # noqa: BLE001 - provenance is advisory
        return False


def provenance_tags(spec: Any, rt: Any, end: dict[str, Any], instance: Any = None) -> dict[str, str]:
    """dagster/input_data_version/<source key> = what batch N read (module doc), for the source
    assets observed here and the Delta tables other queries write, once they have a data version
    on `instance`; `end` = offsets[N].end."""
    tags: dict[str, str] = {}
    for i, (keys, src) in enumerate(zip(source_keys_by_index(spec, rt), rt.sources)):
        versions = read_version(src, end.get(str(i)))
        if not versions:
            continue
        for key in keys:
            if key in getattr(spec, "written_sources", set()) and key.path[0] != "delta":
                continue                  # another query's parquet/Kafka/... sink: Dagster's provenance
            if not _has_version(instance, key):
                continue                  # never observed: Dagster's initial version stays the input's
            v = versions.get(None) or next((x for t, x in versions.items() if t is not None and _part(t) == key.path[-1]),
                                           None)
            if v:
                tags[get_input_data_version_tag(key)] = v
    return tags


def sink_data_version(rt: Any, sink_version: Any) -> str | None:
    """A Delta sink's data version: the table version the batch committed (module doc)."""
    if "delta" in type(rt.sink).__name__.lower() and isinstance(sink_version, int):
        return str(sink_version)
    return None


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
    events = []
    for keys, st in zip(source_keys_by_index(spec, rt), source_state(rt)):
        for key in keys:
            md: dict[str, Any] = {"reader": spec.name}
            for k, v in st["backlog"].items():
                md[k] = dg.MetadataValue.json(v) if isinstance(v, (dict, list)) else v
            if st.get("error"):
                md["error"] = st["error"]
            version = next((x for t, x in (st.get("data_versions") or {}).items() if _part(t) == key.path[-1]),
                           st.get("data_version"))
            tags = ({DATA_VERSION_TAG: version} if version and key not in (materialized or set()) else None)
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


def observable_source(asset_spec: Any, readers: list[Any]) -> Any:
    """The asset of a source no query of the location writes, as an observable source asset: its
    observation (the UI's "Observe sources", or the `<q>_freshness` sensor's, as events) carries
    the backlog and the data version, and Dagster compares that version with what the sink's last
    batch read (provenance_tags): a plain asset spec's observations do not count for staleness."""
    key = asset_spec.key

    name = re.sub(r"[^A-Za-z0-9_]", "_", "observe__" + "__".join(key.path))

    @dg.multi_observable_source_asset(specs=[asset_spec], name=name)
    def observe(context):
        yield observe_source(key, readers)
    return observe


def observe_source(key: Any, readers: list[Any]) -> Any:
    """One ObserveResult of a source asset: the first reader's figures and data version (module
    doc); with several readers each one's backlog under `<figure>[<query>]`."""
    md: dict[str, Any] = {"reader": ", ".join(sp.name for sp in readers)}
    version = None
    for n, sp in enumerate(readers):
        try:
            rt = runner.build_runtime(sp.writer_factory, sp.path, staging="memory")
        except Exception as e:  # noqa: BLE001 - e.g. the table does not exist yet
            md[f"error[{sp.name}]" if len(readers) > 1 else "error"] = f"{type(e).__name__}: {e}"[:300]
            continue
        try:
            ev = next((e for e in observation_events(sp, rt) if e.asset_key == key), None)
        finally:
            runner.close_quietly(rt)
        if ev is None:
            continue
        version = version or (ev.tags or {}).get(DATA_VERSION_TAG)
        for k, v in ev.metadata.items():
            if k != "reader":
                md[k if n == 0 or len(readers) == 1 else f"{k}[{sp.name}]"] = v
    return dg.ObserveResult(asset_key=key, metadata=md, data_version=dg.DataVersion(version) if version else None)

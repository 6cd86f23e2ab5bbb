"""Asset keys named by what a query reads and writes, so lineage spans queries.

    Kafka topic t                  -> kafka/<t>
    files under a location         -> files/<path parts>        (read_stream.files, parquet sink)
    Delta table at a location      -> delta/<path parts>        (read_stream.delta, delta sink)
    PostgreSQL table schema.table  -> postgres/<schema>/<table>
    Iceberg table ns.table         -> iceberg/<namespace parts>/<table>  (read_stream.iceberg, iceberg sink)
    Kafka sink of topic t          -> kafka/<t> (the source's asset: a query reading what another
                                      writes is downstream of it; a `topic` column: sink/<query>)
    anything else (memory, console, foreach_batch)  -> stream/<query>/<i> (source), sink/<query>

Path parts are relative to `asset_root` when the location is under it (else to the working
directory when under it, else absolute); URLs keep their scheme and bucket (s3/bucket/...), never
their credentials. Two queries reading one topic share its asset; a query reading the Delta table
another query writes is downstream of it: bronze -> silver -> gold is a chain in the asset graph.

A sink is not partitioned: each materialization is one committed batch (metadata batch_id, its run
tagged increments/batch_id), so Materialize needs no partition key; factory.make_batch_asset makes
the spec of a sink one query writes a graph-backed asset.
"""
from __future__ import annotations

import os
import re
from typing import Any

import dagster as dg

from increments.options import writer_options
from increments.redaction import redact_url

from .metadata import sink_kinds, source_kinds


def trigger_text(trigger: Any) -> str:
    """The trigger as the query states it: 'processing_time="10 seconds"', 'available_now', 'once'."""
    if trigger.kind != "processing_time":
        return trigger.kind
    ms = int(trigger.interval_ms)
    for unit, size in (("hour", 3_600_000), ("minute", 60_000), ("second", 1000)):
        if ms and ms % size == 0:
            n = ms // size
            return f'processing_time="{n} {unit}{"s" if n != 1 else ""}"'
    return f'processing_time="{ms} milliseconds"'


def _part(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]", "_", s) or "_"


def path_parts(path: str, root: str | None = None) -> list[str]:
    """Location -> asset key parts (see module doc)."""
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(?:[^/@]*@)?([^/?#]*)([^?#]*)", path)
    if m and m.group(1) != "file":
        return [_part(m.group(1)), _part(m.group(2))] + [_part(p) for p in m.group(3).split("/") if p]
    if m:
        path = m.group(3)
    p = os.path.abspath(path)
    for base in (root, os.getcwd()):
        if base:
            b = os.path.abspath(base)
            if p == b or p.startswith(b.rstrip(os.sep) + os.sep):
                rel = os.path.relpath(p, b)
                return [_part(x) for x in rel.split(os.sep) if x and x != "."] or [_part(os.path.basename(b))]
    return [_part(x) for x in p.split(os.sep) if x]


def source_assets(source: Any, query_key: str, index: int, root: str | None) -> list[tuple[dg.AssetKey, str]]:
    """[(key, description)] of what one source reads."""
    kind = type(source).__name__.lower()
    if "kafka" in kind and getattr(source, "topics", None):
        return [(dg.AssetKey(["kafka", _part(t)]), f"Kafka topic {t}") for t in source.topics]
    if "iceberg" in kind and getattr(source, "table_name", None):
        return [_iceberg(source.table_name)]
    path = getattr(source, "path", None)
    if isinstance(path, str) and "delta" in kind:
        return [(dg.AssetKey(["delta", *path_parts(path, root)]), f"Delta table {redact_url(path)}")]
    if isinstance(path, str):
        return [(dg.AssetKey(["files", *path_parts(path, root)]), f"files under {redact_url(path)}")]
    return [(dg.AssetKey(["stream", query_key, str(index)]), f"source {index} of query {query_key} "
                                                              f"({getattr(source, 'description', kind)})")]


def sink_asset(settings: Any, path: str | None, query_key: str, root: str | None) -> tuple[dg.AssetKey, str]:
    """(key, description) of the table a query writes."""
    sink = settings.sink
    fmt = (settings.format or "").lower()
    o = writer_options(settings, required=False)
    where = path or settings.path or o["path"]
    if sink is not None:
        kind = type(sink).__name__.lower()
        where = getattr(sink, "path", None)
        fmt = next((f for f in ("delta", "parquet", "postgres", "iceberg", "kafka") if f in kind), "")
        if fmt == "postgres":
            return _pg(getattr(sink, "table", None), query_key)
        if fmt == "iceberg":
            where = getattr(sink, "name", None)
        if fmt == "kafka":
            return _kafka(getattr(sink, "topic", None), query_key)
    if settings.foreach_batch is not None:
        fmt = "foreach_batch"
    if fmt == "delta" and where:
        return dg.AssetKey(["delta", *path_parts(where, root)]), f"Delta table {redact_url(where)}"
    if fmt == "parquet" and where:
        return dg.AssetKey(["files", *path_parts(where, root)]), f"parquet files under {redact_url(where)}"
    if fmt in ("postgres", "postgresql"):
        return _pg(o["table"], query_key)
    if fmt == "iceberg" and (where or o["table"]):
        return _iceberg(str(where or o["table"]))
    if fmt == "kafka":
        return _kafka(o["topic"], query_key)
    return dg.AssetKey(["sink", query_key]), f"{fmt or 'custom'} sink of query {query_key}"


def _pg(table: Any, query_key: str) -> tuple[dg.AssetKey, str]:
    if not table:
        return dg.AssetKey(["sink", query_key]), f"PostgreSQL sink of query {query_key}"
    return dg.AssetKey(["postgres", *[_part(p) for p in str(table).split(".")]]), f"PostgreSQL table {table}"


def _iceberg(name: str) -> tuple[dg.AssetKey, str]:
    parts = [p for p in str(name).split(".") if p]
    return dg.AssetKey(["iceberg", *[_part(p) for p in parts]]), f"Iceberg table {name}"


def _kafka(topic: Any, query_key: str) -> tuple[dg.AssetKey, str]:
    if not topic:
        return dg.AssetKey(["sink", query_key]), f"kafka sink of query {query_key} (topic column per row)"
    return dg.AssetKey(["kafka", _part(str(topic))]), f"Kafka topic {topic}"


def build_assets(specs: list[Any]) -> list[Any]:
    """One definition per key across all queries: sinks (AssetSpecs with deps on their sources;
    factory.py makes a sink one query writes a graph-backed asset) and the sources no query of this
    location writes (observable source assets: observations.observable_source). Kinds:
    orchestration/metadata.py."""
    writers: dict[dg.AssetKey, list[Any]] = {}
    for s in specs:
        writers.setdefault(s.sink_key, []).append(s)
    readers: dict[dg.AssetKey, list[str]] = {}
    descs: dict[dg.AssetKey, str] = {}
    for s in specs:
        for k, d in s.source_assets:
            readers.setdefault(k, []).append(s.name)
            descs.setdefault(k, d)
    out = []
    for key, ws in writers.items():
        deps = sorted({k for s in ws for k, _ in s.source_assets if k != key}, key=lambda k: k.path)
        names = ", ".join(s.name for s in ws)
        md = {"written_by": names, "trigger": "; ".join(f"{s.name}: {trigger_text(s.trigger)}" + (
            f" (drained on {s.cron_schedule!r} by schedule {s.key}_available_now_schedule)"
            if s.trigger.kind == "available_now" else "") for s in ws)}
        if key in readers:
            md["read_by"] = ", ".join(readers[key])
        out.append(dg.AssetSpec(key, deps=deps, group_name="increments", kinds=sink_kinds(key, ws[0].sink_description),
                                description=f"{ws[0].sink_description}, written by streaming query {names}: one "
                                            "materialization per committed micro-batch"
                                            + (" (Materialize runs the next batch)" if len(ws) == 1 else
                                               " (launch a writer's <query>_batch job to run its next batch)"),
                                metadata=md))
    from .observations import observable_source  # noqa: PLC0415 - cycle: orchestration.observations -> orchestration.assets
    for key, names in readers.items():
        if key in writers:
            continue
        out.append(observable_source(
            dg.AssetSpec(key, group_name="increments", kinds=source_kinds(key, descs[key]),
                         description=f"{descs[key]}, read by streaming query {', '.join(names)}; observed (backlog, "
                                     "data version) by the readers' freshness sensors",
                         metadata={"read_by": ", ".join(names)}),
            [s for s in specs if key in s.source_keys()]))
    return out

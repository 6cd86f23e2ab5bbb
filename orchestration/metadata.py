"""Metadata of a query's sink materializations and the kinds of its assets, as Dagster's own
integrations (dagster-deltalake, dbt, Sling) report them, beside the batch's lineage.

Every sink materialization (one per committed batch) carries:
    dagster/row_count       the table's rows after the batch where the sink can tell: Delta (the
                            snapshot's add-action record counts), parquet sink (its manifests'
                            rows, up to MAX_MANIFESTS_COUNTED batches), PostgreSQL (count(*)),
                            Iceberg (the current snapshot's total-records), memory; for a sink
                            without a table of rows (Kafka, foreach_batch, console) the rows this
                            batch wrote. `row_count_of` says which ("table" or "batch").
    dagster/column_schema   the query's output schema as a TableSchema (name, type, nullability)
    dagster/uri             Delta and parquet locations (credentials redacted), kafka://servers/topic
    dagster/table_name      PostgreSQL and Iceberg tables
    batch metadata          batch_id and attempt as text (not plotted: they are identifiers),
                            offsets, rows, durations, state, sink version; watermark and
                            next_watermark only for a query with an event-time watermark
    lineage                 per source what the batch read (increments/execution/lineage.py):
                            `read` (one line), `lineage` (json: file names, Kafka ranges, Delta
                            versions), and for batches of other queries read, `upstream`
                            ("clicks_bronze 3-4"), `upstream_batches` (json) and a link to each
                            upstream batch's run (`upstream_run[<query> <batch>]`, the first
                            MAX_RUN_LINKS) when this instance ran it
Kinds: the storage (delta, parquet, postgres, kafka, iceberg, duckdb, ...) plus the object store
(s3, gcs, azure) of the location, instead of one `increments` kind.
"""
from __future__ import annotations

import json
from typing import Any

import dagster as dg

from increments import storage
from increments.execution.lineage import describe, upstream_of, upstream_text

from .ops import BATCH_TAG, OUTCOME_TAG, QUERY_TAG

MAX_RUN_LINKS = 5
MAX_MANIFESTS_COUNTED = 2000     # a parquet sink with more batches reports the batch's rows (row_count_of "batch")
_STORES = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure",
           "azure": "azure"}


# -- kinds ------------------------------------------------------------------------------------------
def _store_kind(parts: list[str]) -> set[str]:
    return {_STORES[parts[1]]} if len(parts) > 1 and parts[1] in _STORES else set()


def sink_kinds(key: dg.AssetKey, description: str = "") -> set[str]:
    """The kinds of a sink asset: its storage (from its key, assets.py, and its description) plus
    `duckdb`, the engine that computes every batch written to it (at most 3, Dagster's limit)."""
    return _sink_storage_kinds(key, description) | {"duckdb"}


def _sink_storage_kinds(key: dg.AssetKey, description: str = "") -> set[str]:
    p = list(key.path)
    head = p[0] if p else ""
    if head == "delta":
        return {"delta"} | _store_kind(p)
    if head == "files":
        return {"parquet"} | _store_kind(p)
    if head in ("postgres", "kafka", "iceberg"):
        return {head}
    fmt = (description.split(" ", 1)[0] if description else "").lower()
    if "postgres" in description.lower():
        return {"postgres"}
    return {{"foreach_batch": "python", "custom": "python", "": "python"}.get(fmt, fmt)}


def source_kinds(key: dg.AssetKey, description: str = "") -> set[str]:
    """The kinds of a source asset: kafka, delta, files (+ the object store), iceberg, ..."""
    p = list(key.path)
    head = p[0] if p else ""
    if head in ("kafka", "delta", "postgres", "iceberg"):
        return {head} | _store_kind(p)
    if head == "files":
        return {"files"} | _store_kind(p)
    low = description.lower()
    for k in ("kafka", "iceberg", "delta", "memory"):
        if k in low:
            return {k}
    return {"python"}


# -- the sink's table ---------------------------------------------------------------------------------
def column_schema(schema: Any) -> dg.TableSchema:
    """A pyarrow schema as Dagster's TableSchema."""
    return dg.TableSchema(columns=[dg.TableColumn(f.name, str(f.type),
                                                  constraints=dg.TableColumnConstraints(nullable=f.nullable))
                                   for f in schema])


def table_address(sink: Any) -> dict[str, Any]:
    """dagster/uri or dagster/table_name of the sink's table ({} when it has none)."""
    name = type(sink).__name__.lower()
    if "postgres" in name and getattr(sink, "table", None):
        return {"dagster/table_name": str(sink.table)}
    if "iceberg" in name and getattr(sink, "name", None):
        return {"dagster/table_name": str(sink.name)}
    if "kafka" in name:
        try:
            servers = sink.servers
        except Exception:  # noqa: BLE001
            servers = ""
        return {"dagster/uri": f"kafka://{servers}/{getattr(sink, 'topic', None) or '<topic column>'}"}
    path = getattr(sink, "path", None)
    if isinstance(path, str) and path:
        uri = storage.redact_url(path) if storage.scheme_of(path) else "file://" + path
        return {"dagster/uri": uri}
    return {}


def table_row_count(rt: Any) -> int | None:
    """The sink table's rows after the batch, where the sink can tell (module doc); None if not."""
    sink = rt.sink
    name = type(sink).__name__.lower()
    try:
        if "delta" in name and hasattr(sink, "_table"):
            import pyarrow as pa  # noqa: PLC0415 - pyarrow: kept off the code location's import path
            import pyarrow.compute as pc  # noqa: PLC0415 - pyarrow: kept off the code location's import path
            dt = sink._table()
            if dt is None:
                return 0
            n = pc.sum(pa.table(dt.get_add_actions(flatten=True)).column("num_records")).as_py()
            return int(n or 0)
        if "parquet" in name and getattr(sink, "loc", None) is not None:
            entries = [o.name for o in sink.loc.list("_manifest/") if o.name.endswith(".json")]
            if len(entries) > MAX_MANIFESTS_COUNTED:      # reading them all per batch would grow with the table
                return None
            return sum(int(json.loads(sink.loc.read_bytes(n)).get("num_rows") or 0) for n in entries)
        if "postgres" in name and hasattr(sink, "row_count"):
            return sink.row_count()
        if "memory" in name and hasattr(sink, "table"):
            return int(sink.table().num_rows)
        if "iceberg" in name and hasattr(sink, "_load"):
            t = sink._load()                  # the current snapshot's summary counts the table's rows
            snap = t.current_snapshot() if t is not None else None
            from increments.sinks.iceberg_table import snapshot_summary  # noqa: PLC0415 - increments.sinks.iceberg_table (numpy, pyarrow): kept off the code location's import path
            total = snapshot_summary(snap).get("total-records") if snap is not None else None
            return int(total) if total is not None else (0 if t is not None and snap is None else None)
    except Exception:  # noqa: BLE001 - the count is advisory; the batch is committed
        return None
    return None


def standard_metadata(rt: Any, num_output_rows: int) -> dict[str, Any]:
    """dagster/row_count, dagster/column_schema and the table's address (module doc)."""
    md: dict[str, Any] = {}
    n = table_row_count(rt)
    md["dagster/row_count"] = n if n is not None else int(num_output_rows)
    md["row_count_of"] = "table" if n is not None else "batch"
    try:
        md["dagster/column_schema"] = column_schema(rt.plan.output_schema)
    except Exception:  # noqa: BLE001
        pass
    md.update(table_address(rt.sink))
    return md


# -- the batch ------------------------------------------------------------------------------------------
def batch_metadata(rec: dict[str, Any], run_id: str, has_watermark: bool = True) -> dict[str, Any]:
    """The batch's own entries (numbers are plotted over batches in the UI; identifiers are text)."""
    md: dict[str, Any] = {
        "batch_id": dg.MetadataValue.text(str(rec["batch_id"])),
        "attempt": dg.MetadataValue.text(str(rec["attempt"])), "offsets": rec["offsets"],
        "sources": dg.MetadataValue.json(rec["sources"]),
        "num_input_rows": rec["num_input_rows"], "num_output_rows": rec["num_output_rows"],
        "state_versions": dg.MetadataValue.json(rec["state_versions"]),
        "state_rows_total": rec["state_rows_total"], "sink": rec["sink"],
        "sink_version": _sink_version(rec["sink_version"]),
        "durations_ms": dg.MetadataValue.json(rec["durations_ms"]),
        "batch_duration_ms": int(rec["durations_ms"].get("trigger_execution", 0)),
        "processed_rows_per_second": float(rec["processed_rows_per_second"]),
        "dagster_run_id": run_id, "dagster_run": dg.MetadataValue.dagster_run(run_id), "query_id": rec["query_id"],
    }
    if has_watermark:
        if rec.get("watermark_ms") and rec["watermark_ms"] > 0:
            md["watermark"] = dg.MetadataValue.timestamp(rec["watermark_ms"] / 1000)
        if rec.get("next_watermark_ms") and rec["next_watermark_ms"] > 0:
            md["next_watermark"] = dg.MetadataValue.timestamp(rec["next_watermark_ms"] / 1000)
    return md


def _sink_version(v: Any) -> Any:
    """As `increments history` prints it: the number, '-' when the sink has no versions."""
    if v is None:
        return "-"
    return v if isinstance(v, int) else dg.MetadataValue.json({"version": v})


def lineage_entries(progress: dict[str, Any], instance: Any = None) -> dict[str, Any]:
    """`read`, `lineage`, `upstream`, `upstream_batches` and links to upstream runs (module doc)."""
    srcs = progress.get("sources") or []
    lins = [s.get("lineage") or {} for s in srcs]
    md: dict[str, Any] = {}
    if not any(lins):
        return md
    md["read"] = "; ".join(f"{i}: {describe(x)}" for i, x in enumerate(lins))
    md["lineage"] = dg.MetadataValue.json([{"source": i, **x} for i, x in enumerate(lins)])
    up = upstream_of(srcs)
    if up:
        md["upstream"] = upstream_text(up)
        md["upstream_batches"] = dg.MetadataValue.json(up)
        if instance is not None:
            md.update(upstream_run_links(instance, up))
    return md


def upstream_run_links(instance: Any, upstream: list[dict[str, Any]]) -> dict[str, Any]:
    """`upstream_run[<query> <batch>]` -> the run that committed it, when this instance has it."""
    out: dict[str, Any] = {}
    for u in upstream:
        for b in u["batch_ids"][-MAX_RUN_LINKS:]:
            if len(out) >= MAX_RUN_LINKS:
                return out
            try:
                runs = instance.get_runs(filters=dg.RunsFilter(tags={QUERY_TAG: u["query"], BATCH_TAG: str(b)}),
                                         limit=5)
            except Exception:  # noqa: BLE001 - links are advisory
                return out
            done = [r for r in runs if r.tags.get(OUTCOME_TAG) == "committed"] or \
                   [r for r in runs if r.status == dg.DagsterRunStatus.SUCCESS]
            if done:
                out[f"upstream_run[{u['query']} {b}]"] = dg.MetadataValue.dagster_run(done[0].run_id)
    return out


def materialization_metadata(rt: Any, rec: dict[str, Any], progress: dict[str, Any], run_id: str,
                             instance: Any = None) -> dict[str, Any]:
    """Everything on batch N's sink materialization (module doc)."""
    md = standard_metadata(rt, rec["num_output_rows"])
    md.update(batch_metadata(rec, run_id, has_watermark=bool(getattr(rt.plan, "watermark_delays", None))))
    try:
        md.update(lineage_entries(progress, instance))
    except Exception:  # noqa: BLE001 - lineage is advisory; the batch is committed
        pass
    return md

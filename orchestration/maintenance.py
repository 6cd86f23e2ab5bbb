"""Delta sink maintenance: job `<q>_compact` and schedule `<q>_compact_schedule` (stopped by default).

A streaming Delta sink gets one small file per batch (per partition). For each query whose sink is
a Delta table, the job runs, in one op:

    optimize:  DeltaTable.optimize.compact(target_size)            (delta-rs bin-packing), or
               DeltaTable.optimize.z_order(columns, target_size)   when compact_z_order is set
    vacuum:    DeltaTable.vacuum(retention_hours, dry_run=False)   deletes files no version newer
               than the retention still needs

and records what it did as an AssetObservation on the sink asset (files before/after, files added
and removed, files vacuumed, the table version). It runs concurrently with the streaming writer:
optimize commits with dataChange=false (the rows are unchanged) and never conflicts with the
writer's blind appends; the writer's app transaction (app_id = query id, version = batch id) is
part of the table's state, which optimize and vacuum keep, so exactly-once survives compaction.
A compaction that loses a commit race is retried by the op's RetryPolicy. The compact run carries
tag increments/maintenance=<q>, not the query's tag, so batch runs are not held behind it.

An Iceberg sink (format("iceberg")) gets the same job and schedule running
increments/sinks/iceberg_maintenance.maintain in one op: compaction of the small files into one
REPLACE snapshot (streaming readers skip it; the sink's exactly-once marker is kept), then expiry
of snapshots older than vacuum_retention and deletion of the files only they referenced; the
catalog is the sink's as it resolves it (a SQL catalog without uri: the query's own log). The
observation on the sink asset: files before/after, removed/added, snapshots expired, files
deleted, the current snapshot id. compact_z_order is refused for an Iceberg sink.

Options of @streaming_query / query_definitions:
    compact_cron             cron of the schedule (default "0 3 * * *")
    compact_schedule_status  "stopped" (default) or "running"
    compact_z_order          column list (or comma-separated string) to z-order by
    compact_target_size      target file size in bytes (delta-rs default: 100 MiB or the table's)
    vacuum_retention         a duration ("168 hours", "7 days"; default 7 days = Delta's default).
                             Below the table's delta.deletedFileRetentionDuration it is still
                             applied (enforce_retention_duration=False): readers of versions older
                             than the retention (a Delta source behind by that much, time travel)
                             then lose their files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import dagster as dg

from increments import storage
from increments.durations import parse_duration_ms
from increments.options import writer_options

from . import runner
from .ops import redacted_errors

MAINTENANCE_TAG = "increments/maintenance"
OPTIONS = ("compact_cron", "compact_schedule_status", "compact_z_order", "compact_target_size", "vacuum_retention")
DEFAULT_COMPACT_CRON = "0 3 * * *"
DEFAULT_RETENTION = "7 days"


@dataclass
class CompactSettings:
    cron: str = DEFAULT_COMPACT_CRON
    status: str = "stopped"
    z_order: list[str] | None = None
    target_size: int | None = None
    retention_hours: int = 168


def pop_options(options: dict[str, Any]) -> CompactSettings:
    """Take the compaction options out of a query's options (the rest go to QuerySpec)."""
    z = options.pop("compact_z_order", None)
    if isinstance(z, str):
        z = [c.strip() for c in z.split(",") if c.strip()]
    status = options.pop("compact_schedule_status", "stopped")
    if status not in ("stopped", "running"):
        raise ValueError(f"compact_schedule_status={status!r}: use 'stopped' or 'running'")
    size = options.pop("compact_target_size", None)
    hours = parse_duration_ms(options.pop("vacuum_retention", DEFAULT_RETENTION)) / 3_600_000
    if hours != int(hours):
        raise ValueError(f"vacuum_retention: {hours} hours; delta-rs vacuums by whole hours")
    return CompactSettings(cron=options.pop("compact_cron", DEFAULT_COMPACT_CRON), status=status,
                           z_order=list(z) if z else None, target_size=int(size) if size else None,
                           retention_hours=int(hours))


def delta_target(writer: Any, path: str | None = None) -> tuple[str, dict | None] | None:
    """(table path, storage_options) of a writer whose sink is a Delta table, else None."""
    s = writer.settings
    if s.foreach_batch is not None or s.sink is not None or (s.format or "").lower() != "delta":
        return None
    o = writer_options(s, required=False)
    where = path or s.path or o["path"]
    if not where:
        return None
    where = os.fspath(where)
    where = where.rstrip("/") if storage.scheme_of(where) else os.path.abspath(where)
    opts = {**(o["storage_options"] or {})}
    return where, (opts or None)


def iceberg_target(writer: Any, path: str | None = None) -> str | None:
    """The table ("namespace.table") of a writer whose sink is Iceberg, else None."""
    s = writer.settings
    if s.foreach_batch is not None:
        return None
    if s.sink is not None:
        return getattr(s.sink, "name", None) if "iceberg" in type(s.sink).__name__.lower() else None
    if (s.format or "").lower() != "iceberg":
        return None
    o = writer_options(s, required=False)
    return str(path or s.path or o["path"] or o["table"] or "") or None


def maintain_iceberg(spec: Any, table: str, settings: CompactSettings) -> dict[str, Any]:
    """compact + expire the query's Iceberg table with the catalog its sink resolves (module doc)."""
    from increments.sinks.iceberg_maintenance import maintain  # noqa: PLC0415 - increments.sinks.iceberg_maintenance (numpy, pyarrow): kept off the code location's import path
    rt = runner.build_runtime(spec.writer_factory, spec.path, staging="memory")
    try:
        sink = rt.sink                                    # opened by the build: its catalog resolved
        props = getattr(sink, "props", None) or sink.catalog_conf
        return maintain(table, dict(props), getattr(sink, "own_storage_options", None) or None,
                        target_size=settings.target_size, retention_ms=settings.retention_hours * 3_600_000)
    finally:
        runner.close_quietly(rt)


def compact_table(path: str, storage_options: dict | None, settings: CompactSettings) -> dict[str, Any]:
    """optimize (compact or z-order) then vacuum the Delta table at `path`; returns the metrics."""
    from deltalake import DeltaTable  # noqa: PLC0415 - deltalake: kept off the code location's import path
    dt = DeltaTable(path, storage_options=storage_options)
    before = len(dt.file_uris())
    kw = {"target_size": settings.target_size} if settings.target_size else {}
    if settings.z_order:
        opt = dt.optimize.z_order(settings.z_order, **kw)
    else:
        opt = dt.optimize.compact(**kw)
    dt = DeltaTable(path, storage_options=storage_options)
    vacuumed = dt.vacuum(retention_hours=settings.retention_hours, dry_run=False, enforce_retention_duration=False)
    dt = DeltaTable(path, storage_options=storage_options)
    return {"files_before": before, "files_after": len(dt.file_uris()),
            "files_added": int(opt.get("numFilesAdded", 0)), "files_removed": int(opt.get("numFilesRemoved", 0)),
            "files_vacuumed": len(vacuumed), "table_version": dt.version(),
            "z_order": ",".join(settings.z_order or []), "vacuum_retention_hours": settings.retention_hours}


def compact_definitions(spec: Any, settings: CompactSettings, max_retries: int = 3) -> dg.Definitions:
    """Job `<q>_compact` and schedule `<q>_compact_schedule` for a query with a Delta sink; empty
    Definitions for any other sink."""
    target = delta_target(spec.writer_factory(), spec.path)
    if target is None:
        table = iceberg_target(spec.writer_factory(), spec.path)
        return iceberg_definitions(spec, table, settings, max_retries) if table else dg.Definitions()
    path, opts = target
    what = "z-order by " + ", ".join(settings.z_order) if settings.z_order else "compact"

    @dg.op(name=f"{spec.key}__compact", retry_policy=dg.RetryPolicy(max_retries=max_retries, delay=2.0),
           description=f"Optimize ({what}) and vacuum ({settings.retention_hours} h) the Delta sink of {spec.name}.")
    @redacted_errors
    def compact_op(context):
        m = compact_table(path, opts, settings)
        context.log.info(f"{spec.name}: {m['files_before']} files -> {m['files_after']} "
                         f"({m['files_removed']} rewritten into {m['files_added']}), {m['files_vacuumed']} vacuumed, "
                         f"table version {m['table_version']}")
        context.log_event(dg.AssetObservation(asset_key=spec.sink_key, metadata={"maintenance": "compact", **m}))
        return m

    @dg.job(name=f"{spec.key}_compact", tags={MAINTENANCE_TAG: spec.name}, executor_def=dg.in_process_executor,
            description=f"Compact ({what}) and vacuum the Delta sink of streaming query {spec.name}; safe while "
                        "the query runs.")
    def compact_job():
        compact_op.alias("compact")()

    status = dg.DefaultScheduleStatus.RUNNING if settings.status == "running" else dg.DefaultScheduleStatus.STOPPED
    schedule = dg.ScheduleDefinition(name=f"{spec.key}_compact_schedule", cron_schedule=settings.cron, job=compact_job,
                                     default_status=status,
                                     description=f"Compaction and vacuum of {spec.name}'s Delta sink on {settings.cron}")
    return dg.Definitions(jobs=[compact_job], schedules=[schedule])


def iceberg_definitions(spec: Any, table: str, settings: CompactSettings, max_retries: int = 3) -> dg.Definitions:
    """Job `<q>_compact` and schedule `<q>_compact_schedule` of a query with an Iceberg sink."""
    if settings.z_order:
        raise ValueError(f"query {spec.name}: compact_z_order applies to Delta sinks; its sink is the Iceberg table "
                         f"{table} (compaction there bin-packs per partition): drop the option")
    hours = settings.retention_hours

    @dg.op(name=f"{spec.key}__compact", retry_policy=dg.RetryPolicy(max_retries=max_retries, delay=2.0),
           description=f"Compact the small files of the Iceberg sink {table} of {spec.name} and expire snapshots "
                       f"older than {hours} h.")
    @redacted_errors
    def compact_op(context):
        m = maintain_iceberg(spec, table, settings)
        context.log.info(f"{spec.name}: {m['files_before']} files -> {m['files_after']} ({m['files_removed']} "
                         f"rewritten into {m['files_added']}), {m['snapshots_expired']} snapshots expired, "
                         f"{m['files_deleted']} files deleted, snapshot {m['snapshot_id']}")
        context.log_event(dg.AssetObservation(asset_key=spec.sink_key, metadata={
            "maintenance": "compact", **{k: v for k, v in m.items() if k != "snapshot_id"},
            "snapshot_id": dg.MetadataValue.text(str(m["snapshot_id"]))}))
        return m

    @dg.job(name=f"{spec.key}_compact", tags={MAINTENANCE_TAG: spec.name}, executor_def=dg.in_process_executor,
            description=f"Compact and expire snapshots of the Iceberg sink {table} of streaming query {spec.name}; "
                        "safe while the query runs.")
    def compact_job():
        compact_op.alias("compact")()

    status = dg.DefaultScheduleStatus.RUNNING if settings.status == "running" else dg.DefaultScheduleStatus.STOPPED
    schedule = dg.ScheduleDefinition(name=f"{spec.key}_compact_schedule", cron_schedule=settings.cron, job=compact_job,
                                     default_status=status,
                                     description=f"Compaction and snapshot expiry of {spec.name}'s Iceberg sink on "
                                                 f"{settings.cron}")
    return dg.Definitions(jobs=[compact_job], schedules=[schedule])

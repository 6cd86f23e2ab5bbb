"""AvailableNow: the drain job (UI-launchable), its cron schedule, and the job drains are listed under.

Job `<q>_available_now` fixes each source's target (the offsets latest now) in the log's
increments_drains table, records the drain as a backfill of `<q>_drain` and queues its first batch
run, and ends; each batch run then queues the next (chain.py; each capped by
max_offsets_per_trigger / max_files_per_trigger) until the commit op finds nothing left under the
targets and marks the drain done. Starting a drain while one is active keeps the active one (its
target does not move). The drain's state is an observation on the sink asset and is printed by
`increments history`.
"""
from __future__ import annotations

import json
import uuid
from typing import Any

import dagster as dg

from . import chain, runner
from .ops import DRAIN_TAG, redacted_errors


def make_drain_job(spec: Any) -> dg.JobDefinition:
    @dg.op(name=f"{spec.key}__start_drain", description="Fix the AvailableNow targets of a new drain; record it as "
                                                        "a backfill and queue its first batch run.")
    @redacted_errors
    def start_drain_op(context):
        rt = runner.build_runtime(spec.writer_factory, spec.path, context.run_id, staging="memory")
        try:
            drain, created, backfill_id = _start(context, spec, rt)
            targets = json.dumps(drain.targets, sort_keys=True, default=str)
            context.log.info(f"{rt.where()}: AvailableNow drain {drain.drain_id} "
                             f"{drain.state if created else 'already active'}; targets {targets[:2000]}"
                             + (f"; backfill {backfill_id}" if backfill_id else ""))
            context.log_event(dg.AssetObservation(asset_key=spec.sink_key, metadata={
                "drain_id": drain.drain_id, "drain_state": drain.state, "created": created,
                "targets": dg.MetadataValue.json(drain.targets),
                **({"backfill": backfill_id} if backfill_id else {})}))
            return drain.drain_id
        finally:
            runner.close_quietly(rt)

    @dg.job(name=f"{spec.key}_available_now", tags=spec.drain_job_tags, executor_def=dg.in_process_executor,
            description=f"Start an AvailableNow drain of query {spec.name}: a backfill of {spec.key}_drain whose "
                        "batches run one at a time until the offsets available now are processed.")
    def drain_job():
        start_drain_op.alias("start_drain")()

    return drain_job


def _start(context: Any, spec: Any, rt: Any) -> tuple[Any, bool, str | None]:
    """(drain, created, backfill id): the active drain, or a new one with the targets available now;
    a new drain with work gets its backfill and first batch run before it is recorded active (so the
    trigger sensor never requests that batch too); one with nothing to do is recorded done."""
    from increments.checkpoint.drains import DrainLog  # noqa: PLC0415 - increments.checkpoint.drains (sqlalchemy): kept off the code location's import path

    drains = DrainLog.for_runtime(rt)
    cur = drains.active()
    if cur is not None:
        context.instance.add_run_tags(context.run_id, {DRAIN_TAG: cur.drain_id})
        return cur, False, None
    targets = runner.drain_targets(rt)
    drain_id = uuid.uuid4().hex[:12]
    context.instance.add_run_tags(context.run_id, {DRAIN_TAG: drain_id})
    backfill_id, work = None, runner.pending_work(rt)
    if work:
        nxt, _ = runner.next_batch_id(rt)
        backfill_id = chain.start_backfill(context, spec, drain_id, nxt, chain.estimate_batches(rt))
    drain, _ = drains.start(targets, drain_id=drain_id)
    if not work:
        drains.finish(drain_id)                 # nothing available now: a drain of no batch
        drain = drains.get(drain_id)
    return drain, True, backfill_id


def make_drain_anchor(spec: Any) -> dg.JobDefinition:
    """Job `<q>_drain`: what the Backfills page lists each AvailableNow drain under. Dagster lists a
    backfill only for a partitioned job; a drain's partitions are its batches ("batch N"), its runs
    `<q>_batch` runs (chain.py). This job has no partitions of its own and runs no batch."""
    @dg.op(name=f"{spec.key}__drain_record")
    def drain_record(context):
        raise dg.Failure(description=f"job {spec.key}_drain only names AvailableNow drains on the Backfills page; "
                                     f"launch {spec.key}_available_now to start a drain")

    @dg.job(name=f"{spec.key}_drain", partitions_def=dg.DynamicPartitionsDefinition(name=f"{spec.key}_drain"),
            description=f"The AvailableNow drains of query {spec.name}, one backfill each on the Backfills page (its "
                        f"partitions: the drain's batches, each a {spec.key}_batch run; cancel stops the drain after "
                        f"the batch in flight commits). Start a drain with {spec.key}_available_now; this job runs "
                        "nothing itself.")
    def anchor():
        drain_record()

    return anchor


def make_schedule(spec: Any, drain_job: dg.JobDefinition) -> dg.ScheduleDefinition:
    status = dg.DefaultScheduleStatus.RUNNING if spec.schedule_status == "running" else dg.DefaultScheduleStatus.STOPPED
    return dg.ScheduleDefinition(name=f"{spec.key}_available_now_schedule", cron_schedule=spec.cron_schedule,
                                 job=drain_job, default_status=status,
                                 description=f"AvailableNow drain of {spec.name} on {spec.cron_schedule}")

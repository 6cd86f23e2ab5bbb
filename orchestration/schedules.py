"""AvailableNow: the drain job (UI-launchable) and its cron schedule.

Job `<q>_available_now` fixes each source's target (the offsets latest now) in the log's
increments_drains table and ends; the query's trigger sensor then requests batch runs one at a time
(each capped by max_offsets_per_trigger / max_files_per_trigger) until the commit op finds nothing
left under the targets and marks the drain done. Starting a drain while one is active keeps the
active one (its target does not move). The drain's state is an observation on the sink asset and
is printed by `increments history`.
"""
from __future__ import annotations

from typing import Any

import dagster as dg


def make_drain_job(spec: Any) -> dg.JobDefinition:
    @dg.op(name=f"{spec.key}__start_drain", description="Fix the AvailableNow targets of a new drain.")
    def start_drain_op(context):
        import json
        from . import runner
        from .ops import DRAIN_TAG
        rt = runner.build_runtime(spec.writer_factory, spec.path, context.run_id, staging="memory")
        try:
            drain, created = runner.start_drain(rt)
            context.instance.add_run_tags(context.run_id, {DRAIN_TAG: drain.drain_id})
            targets = json.dumps(drain.targets, sort_keys=True, default=str)
            context.log.info(f"{rt.where()}: AvailableNow drain {drain.drain_id} "
                             f"{'started' if created else 'already active'}; targets {targets[:2000]}")
            context.log_event(dg.AssetObservation(asset_key=spec.sink_key, metadata={
                "drain_id": drain.drain_id, "drain_state": drain.state, "created": created,
                "targets": dg.MetadataValue.json(drain.targets)}))
            return drain.drain_id
        finally:
            runner.close_quietly(rt)

    @dg.job(name=f"{spec.key}_available_now", tags=spec.drain_job_tags, executor_def=dg.in_process_executor,
            description=f"Start an AvailableNow drain of query {spec.name}: batch runs follow, one at a time, "
                        "until the offsets available now are processed.")
    def drain_job():
        start_drain_op.alias("start_drain")()

    return drain_job


def make_schedule(spec: Any, drain_job: dg.JobDefinition) -> dg.ScheduleDefinition:
    status = dg.DefaultScheduleStatus.RUNNING if spec.schedule_status == "running" else dg.DefaultScheduleStatus.STOPPED
    return dg.ScheduleDefinition(name=f"{spec.key}_available_now_schedule", cron_schedule=spec.cron_schedule,
                                 job=drain_job, default_status=status,
                                 description=f"AvailableNow drain of {spec.name} on {spec.cron_schedule}")

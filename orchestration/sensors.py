"""The trigger sensor of a query: requests the next batch run (one at a time).

Each tick (at most every `sensor_interval_s`, >= 5 s, the processing-time interval when larger):
    a run of the query in flight (queued .. started)           -> skip
    the last run failed and Dagster will retry it               -> skip (the retry redoes the batch)
    an AvailableNow drain is active                            -> request batch N with the drain
    processing_time trigger and new data / time-based work     -> request batch N
    otherwise                                                  -> skip (nothing to do)
The request carries run config batch_id=N (so a stale copy of it is refused once N is committed)
and run key `<q>-b<N>-a<k>`, k = how many runs of batch N exist: a failed batch never stalls the
query on an already-used run key. Sources are asked side-effect free (backlog) here.
"""
from __future__ import annotations

from typing import Any

import dagster as dg

from .ops import BATCH_TAG, DRAIN_TAG, QUERY_TAG

IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def in_flight(instance: Any, query: str) -> bool:
    return bool(instance.get_run_records(dg.RunsFilter(tags={QUERY_TAG: query}, statuses=IN_FLIGHT), limit=1))


def retry_pending(instance: Any, query: str) -> bool:
    recs = instance.get_run_records(dg.RunsFilter(tags={QUERY_TAG: query}), limit=1)
    if not recs:
        return False
    run = recs[0].dagster_run
    return run.status == dg.DagsterRunStatus.FAILURE and run.tags.get("dagster/will_retry") == "true"


def batch_request(spec: Any, instance: Any, batch_id: int, drain_id: str | None) -> dg.RunRequest:
    k = len(instance.get_run_ids(dg.RunsFilter(tags={QUERY_TAG: spec.name, BATCH_TAG: str(batch_id)})))
    tags = {BATCH_TAG: str(batch_id)}
    if drain_id:
        tags[DRAIN_TAG] = drain_id
    return dg.RunRequest(run_key=f"{spec.key}-b{batch_id}-a{k + 1}", tags=tags,
                         run_config={"ops": {"plan": {"config": {"batch_id": batch_id, "drain_id": drain_id}}}})


def make_sensor(spec: Any, job: dg.JobDefinition) -> dg.SensorDefinition:
    status = dg.DefaultSensorStatus.RUNNING if spec.sensor_status == "running" else dg.DefaultSensorStatus.STOPPED

    @dg.sensor(name=f"{spec.key}_trigger", job=job, minimum_interval_seconds=spec.sensor_interval_s,
               default_status=status,
               description=f"Trigger of streaming query {spec.name} ({spec.trigger.description}): requests the "
                           "next batch run when none is in flight and there is work (or a drain is active).")
    def trigger(context):
        from increments.checkpoint.drains import DrainLog
        from . import runner
        if in_flight(context.instance, spec.name):
            return dg.SkipReason(f"a run of query {spec.name} is in flight")
        if retry_pending(context.instance, spec.name):
            return dg.SkipReason(f"the last run of query {spec.name} failed and will be retried")
        rt = runner.build_runtime(spec.writer_factory, spec.path, staging="memory")
        try:
            nxt, redo = runner.next_batch_id(rt)
            drain = DrainLog.for_runtime(rt).active()
            if drain is not None:
                return batch_request(spec, context.instance, nxt, drain.drain_id)
            if spec.trigger.kind != "processing_time":
                return dg.SkipReason(f"query {spec.name} ({spec.trigger.description}): no active drain; start one "
                                     f"with job {spec.key}_available_now or its schedule")
            if redo or runner.pending_work(rt):
                return batch_request(spec, context.instance, nxt, None)
            return dg.SkipReason(f"query {spec.name}: no new data and no time-based work after batch {nxt - 1}")
        finally:
            runner.close_quietly(rt)

    return trigger

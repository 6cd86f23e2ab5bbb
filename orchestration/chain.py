"""Drains at the pace of their runs: the commit op of a drain's batch N queues the run of batch N+1.

The new run is created from the current run's own job snapshot, execution plan and code origin
(the same job, the job's tags and tags batch_id=N+1 and the drain id) and submitted to the run
queue. The queue's per-query tag limit holds it until this run ends, then the daemon launches it on
its next dequeue (every second with the shipped dagster.yaml): one run in flight, no wait for the
next sensor tick. Not chained: runs without a code origin (execute_in_process), runs of another job
than `<q>_batch` (a Materialize of the sink asset from the UI runs Dagster's asset job: the sensor
requests the next batch of the drain), and queries whose trigger sensor was stopped in the UI (stopping the sensor pauses the drain after this batch).
A failure here is only logged: the trigger sensor requests the batch on its next tick.
"""
from __future__ import annotations

from typing import Any

from .ops import BATCH_TAG, CHAINED_TAG, DRAIN_TAG


def sensor_stopped(instance: Any, sensor_name: str) -> bool:
    """Was the query's trigger sensor stopped from the UI (a stored state that says so)?"""
    from dagster._core.scheduler.instigation import InstigatorStatus, InstigatorType
    try:
        states = instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
    except Exception:  # noqa: BLE001 - advisory: chain when the state cannot be read
        return False
    return any(st.name == sensor_name and st.status == InstigatorStatus.STOPPED for st in states)


def submit_next_batch(context: Any, spec: Any, batch_id: int, drain_id: str) -> str | None:
    """Queue the run of `batch_id` for drain `drain_id`; its run id (None: not chained)."""
    from dagster import DagsterRunStatus
    inst, run = context.instance, context.dagster_run
    if run.remote_job_origin is None or run.job_snapshot_id is None or run.execution_plan_snapshot_id is None:
        return None
    if run.job_name != f"{spec.key}_batch":
        return None
    if sensor_stopped(inst, f"{spec.key}_trigger"):
        context.log.info(f"sensor {spec.key}_trigger is stopped: the drain pauses after this batch")
        return None
    tags = {**context.job_def.tags, BATCH_TAG: str(batch_id), DRAIN_TAG: drain_id, CHAINED_TAG: context.run_id}
    new = inst.create_run(
        job_name=run.job_name, run_id=None,
        run_config=run.run_config,
        status=DagsterRunStatus.NOT_STARTED, tags=tags, root_run_id=None, parent_run_id=None,
        step_keys_to_execute=None, execution_plan_snapshot=inst.get_execution_plan_snapshot(run.execution_plan_snapshot_id),
        job_snapshot=inst.get_job_snapshot(run.job_snapshot_id), parent_job_snapshot=None, asset_selection=None,
        asset_check_selection=None, resolved_op_selection=None, op_selection=None,
        remote_job_origin=run.remote_job_origin, job_code_origin=run.job_code_origin, asset_graph=None)
    inst.submit_run(new.run_id, workspace=None)
    return new.run_id

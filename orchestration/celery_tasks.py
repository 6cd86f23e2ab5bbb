"""The tasks a warm Celery worker executes (orchestration/celery.py registers them on its app):
dagster-celery 0.29.27's `execute_job` (a whole batch run, sent by the CeleryRunLauncher) and
`execute_plan` (one step, sent by the Celery executor), same names and arguments, with one
difference: the Dagster instance lives as long as the worker's pool process.

dagster-celery builds a new DagsterInstance for every run and every step, and dagster-postgres
storages open a new PostgreSQL connection for every statement (NullPool): measured on a warm
worker (bench/dagster_overhead.py --celery --py-spy), 40% of a batch run's time was connecting
to PostgreSQL (~55 event writes per run, one connection each) and 12% reflecting the event log's
columns for the new instance. Here each pool process keeps one instance per instance ref, its
storages on one pooled connection each (DagsterInstance.optimize_for_webserver, what the
webserver does). A pooled connection that died with a database restart between runs fails its
first statement once (SQLAlchemy then drops that pool's connections): every task first reads
through each storage, once more after such a failure, so the run itself starts on live connections.
"""
from __future__ import annotations

import threading
from typing import Any

import dagster as dg
import dagster_celery

# dagster internals, as dagster-celery 0.29's own tasks use them (pinned family: dagster 1.13.27)
if not dagster_celery.__version__.startswith("0.29."):
    raise ImportError(f"orchestration/celery_tasks.py mirrors dagster-celery 0.29's execute_job and execute_plan tasks "
                      f"(names, arguments, the dagster internals they call); dagster-celery "
                      f"{dagster_celery.__version__} is installed: compare with its dagster_celery/tasks.py, then "
                      f"update the check")
from dagster import serialize_value
from dagster_celery.config import TASK_EXECUTE_JOB_NAME, TASK_EXECUTE_PLAN_NAME
from dagster_celery.core_execution_loop import DELEGATE_MARKER
from dagster_celery.executor import CeleryExecutor

from .celery_warm import WORKER_TAG
from .dagster_internals import (EngineEventData, ExecuteRunArgs, ExecuteStepArgs,  # noqa: E402 - Dagster's private
                                ReconstructableJob, create_execution_plan, execute_plan_iterator, unpack_value)
from .dagster_internals import execute_run_command_body as _execute_run_command_body  # noqa: E402
from .dagster_internals import POOL_OVERFLOW, pool_connections  # noqa: E402

_INSTANCES: dict[str, Any] = {}
_LOCK = threading.Lock()


def warm_instance(ref: Any = None) -> Any:
    """This process's instance for `ref` (None: $DAGSTER_HOME's), created once, storages pooled."""
    key = serialize_value(ref) if ref is not None else ""
    with _LOCK:
        inst = _INSTANCES.get(key)
        if inst is None:
            inst = dg.DagsterInstance.from_ref(ref) if ref is not None else dg.DagsterInstance.get()
            pool_connections(inst, POOL_OVERFLOW)      # the batch ops' own call then finds it pooled
            _INSTANCES[key] = inst
        return inst


def _run_on_live_connections(instance: Any, run_id: str) -> Any:
    """The run, after one read through each storage's pool (runs, events, schedules), each retried
    once: a pooled connection that died (a database restart, a server-side timeout) fails its
    first statement and SQLAlchemy drops that pool's connections; the retry reconnects."""
    reads = [lambda: instance.get_run_by_id(run_id), lambda: instance.get_records_for_run(run_id, limit=1)]
    if instance.schedule_storage is not None:
        reads.append(lambda: instance.schedule_storage.get_instigator_state("increments-probe", "increments-probe"))
    out = []
    for read in reads:
        try:
            out.append(read())
        except Exception:  # noqa: BLE001 - a dead pooled connection: the pool reconnects on the retry
            out.append(read())
    return out[0]


def create_warm_execute_job_task(app: Any) -> Any:
    @app.task(bind=True, name=TASK_EXECUTE_JOB_NAME, track_started=True)
    def _execute_job(_self: Any, execute_job_args_packed: Any) -> int:
        args = unpack_value(execute_job_args_packed, as_type=ExecuteRunArgs)
        instance = warm_instance(args.instance_ref)
        _run_on_live_connections(instance, args.run_id)
        instance.add_run_tags(args.run_id, {WORKER_TAG: _self.request.hostname})   # where this batch ran
        return _execute_run_command_body(
            instance=instance, run_id=args.run_id, write_stream_fn=lambda _event: None,
            set_exit_code_on_failure=args.set_exit_code_on_failure if args.set_exit_code_on_failure is not None else True)
    return _execute_job


def create_warm_execute_plan_task(app: Any) -> Any:
    @app.task(bind=True, name=TASK_EXECUTE_PLAN_NAME)
    def _execute_plan(self: Any, execute_step_args_packed: Any, executable_dict: dict) -> list[str]:
        args = unpack_value(execute_step_args_packed, as_type=ExecuteStepArgs)
        instance = warm_instance(args.instance_ref)
        run = _run_on_live_connections(instance, args.run_id)
        if run is None:
            raise RuntimeError(f"Celery worker {self.request.hostname}: run {args.run_id} is not in the instance")
        job = ReconstructableJob.from_dict(executable_dict)
        plan = create_execution_plan(job, run.run_config, step_keys_to_execute=args.step_keys_to_execute,
                                     known_state=args.known_state)
        keys = ", ".join(args.step_keys_to_execute or [])
        events = [instance.report_engine_event(
            f"Executing steps {keys} in celery worker", run,
            EngineEventData({"step_keys": keys, "Celery worker": self.request.hostname}, marker_end=DELEGATE_MARKER),
            CeleryExecutor, step_key=plan.step_handle_for_single_step_plans().to_key())]
        events.extend(execute_plan_iterator(execution_plan=plan, job=job, dagster_run=run, instance=instance,
                                            retry_mode=args.retry_mode, run_config=run.run_config))
        return [serialize_value(e) for e in events]
    return _execute_plan

"""Warm workers (issue 32): batch runs and partition ops on long-lived Celery workers, with
dagster-celery (same release family as the dagster pin; `pip install increments[celery]`).

Runs: `CeleryRunLauncher` (instance config `run_launcher`, see `instance_section`) sends each
launched run as a Celery task to queue RUN_QUEUE; a worker started with

    DAGSTER_HOME=... python -m orchestration.celery worker -Q increments-runs -n runs1@%h

executes it in its pool process, which stays up between runs: Dagster, the code location and the
engine are imported once per worker process, not once per batch. The queue's tag limit still keeps
one run per query in flight (the run coordinator, unchanged), and every guarantee is the log's:
a worker that dies mid-run leaves offsets[N] without commits[N]; run monitoring marks the run
failed (the task's FAILURE when only the pool process died, or no answer to a ping from the worker
that started it when the whole worker died), run retries relaunch it, and its plan op claims the
redo of batch N (fence, redo, halt as for any crashed run).

Partition ops: `@streaming_query(executor="celery")` runs the batch's steps on the Celery executor;
the fanned-out op of state partition p always goes to queue `increments-p<p mod groups>`
(`partition_queue`), so the worker serving that queue keeps p's RocksDB working copy current
between batches (INCREMENTS_WARM_STATE=1, set by the worker command: the runtime's state provider
outlives the run; the token of commits[N-1] decides whether the working copy is reused or rebuilt
from the checkpoint). The other steps go to queue `dagster`.

Broker and result backend: $INCREMENTS_CELERY_BROKER (default RabbitMQ pyamqp://guest:guest@127.0.0.1:5672//)
and $INCREMENTS_CELERY_BACKEND (default Redis redis://127.0.0.1:6379/0); the result backend must be
shared (not rpc://): run monitoring reads the task's state from the daemon.
"""
from __future__ import annotations

import os
import re
import socket
import sys
import uuid
from typing import Any

import dagster as dg

DEFAULT_BROKER = "pyamqp://guest:guest@127.0.0.1:5672//"
DEFAULT_BACKEND = "redis://127.0.0.1:6379/0"
RUN_QUEUE = "increments-runs"
STEP_QUEUE = "dagster"
PARTITION_QUEUE_PREFIX = "increments-p"
from .celery_tasks import create_warm_execute_job_task, create_warm_execute_plan_task
from .celery_warm import WARM_ENV, WORKER_TAG  # noqa: E402
from .dagster_internals import RetryMode
TICK_S = 0.05          # the executor's poll of its step tasks (dagster-celery's default: 1 s per tick)


def broker_url() -> str:
    return os.environ.get("INCREMENTS_CELERY_BROKER") or DEFAULT_BROKER


def backend_url() -> str:
    return os.environ.get("INCREMENTS_CELERY_BACKEND") or DEFAULT_BACKEND


def instance_section(broker: str | None = None, backend: str | None = None, queue: str = RUN_QUEUE) -> str:
    """The dagster.yaml `run_launcher` section that sends batch runs to warm Celery workers."""
    return ("# Batch runs execute on long-lived Celery workers (orchestration/celery.py):\n"
            "#   python -m orchestration.celery worker -Q increments-runs\n"
            "run_launcher:\n  module: orchestration.celery\n  class: CeleryRunLauncher\n  config:\n"
            f"    broker: \"{broker or broker_url()}\"\n    backend: \"{backend or backend_url()}\"\n"
            f"    default_queue: {queue}\n")


def partition_queue(step_key: str, groups: int) -> str | None:
    """The queue of a fanned-out partition step (`<q>__partition[p<n>]`): one per partition group
    (n mod groups), the same every batch; None for any other step."""
    m = re.search(r"(?:__|\.)partition\[p(\d+)\]$", step_key)
    return f"{PARTITION_QUEUE_PREFIX}{int(m.group(1)) % groups}" if m else None


def _celery_app(broker: str | None = None, backend: str | None = None) -> Any:
    from dagster_celery.make_app import make_app  # noqa: PLC0415 - optional extra increments[celery]: dagster_celery only when used
    from dagster_celery.tasks import create_resume_job_task  # noqa: PLC0415 - optional extra increments[celery]: dagster_celery only when used

    app = make_app({"broker": broker or broker_url(), "backend": backend or backend_url(), "include": [],
                    "config_source": {"worker_prefetch_multiplier": 1, "task_default_queue": STEP_QUEUE,
                                      "result_expires": 3600,
                                      # a worker busy with a run reserves no other run (Celery
                                      # acks a task before running it, then prefetches the next
                                      # one: another query's run would wait for this batch)
                                      "task_annotations": {"execute_job": {"acks_late": True}}},
                    "task_default_queue": STEP_QUEUE})
    create_warm_execute_plan_task(app)      # dagster-celery's tasks, on one Dagster instance per process
    create_warm_execute_job_task(app)
    create_resume_job_task(app)
    return app


def __getattr__(name: str) -> Any:          # `celery -A orchestration.celery` finds `app` lazily
    if name == "app":
        globals()["app"] = _celery_app()
        return globals()["app"]
    raise AttributeError(name)


# -- the run launcher ---------------------------------------------------------------------------
from .dagster_internals import CheckRunHealthResult, EngineEventData, WorkerStatus  # noqa: E402
from dagster_celery.launcher import CeleryRunLauncher as _DagsterCeleryRunLauncher  # noqa: E402
from dagster_celery.launcher import _get_run_priority  # noqa: E402 - dagster-celery 0.29 (celery_tasks.py checks the release)
from dagster_celery.tags import DAGSTER_CELERY_QUEUE_TAG, DAGSTER_CELERY_TASK_ID_TAG  # noqa: E402

PING_MISSES = 2        # consecutive health checks without an answer from the run's worker: it is gone


class CeleryRunLauncher(_DagsterCeleryRunLauncher):
    """dagster-celery's CeleryRunLauncher, plus a health check that asks the run's worker.

    Run monitoring fails a run on any health status but RUNNING or SUCCESS (with resume off), so:
    task SUCCESS / FAILURE (the pool process died: Celery records it) -> as dagster-celery says;
    otherwise the worker that started the task (the node name in the task's STARTED state, which
    the backend expires; else run tag increments/celery_worker, which the worker sets when it starts
    the run) is pinged: it answers -> RUNNING; it missed PING_MISSES consecutive checks -> FAILED (the whole
    worker died: its task would stay STARTED forever), so run retries redo the batch; one miss,
    a broker that does not answer or a worker not known yet -> RUNNING (a slow worker is not
    failed for one late answer: the fence would refuse its attempt, but the batch would be redone).
    Resuming a run on another worker is off: dagster-celery 0.29.27's launcher sends the resume
    task `execute_job_args_packed` where its task takes `resume_job_args_packed` (every resume
    would fail with a TypeError in the worker); a crashed run is retried instead.

    The run's task id is recorded before the task is sent (`_launch_celery_task_run`): from then on
    the launcher does not write the stored run; the run's own processes do (and run monitoring,
    once the run's worker is gone)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._misses: dict[str, int] = {}

    def _launch_celery_task_run(self, run: Any, task_signature: Any, routing_key: str) -> None:
        """dagster-celery 0.29's, in another order: the task id is chosen here and written to the run
        (tag dagster-celery/task_id) *before* the task reaches the broker. dagster-celery writes it
        after apply_async, and Dagster's add_run_tags rewrites the whole stored run from what it read
        just before: a warm worker that took the task at once had meanwhile tagged the run with its
        name (WORKER_TAG) and started it, and the launcher's stale rewrite dropped that tag (and
        could set the status in the stored run back to STARTING)."""
        queue = run.tags.get(DAGSTER_CELERY_QUEUE_TAG, self.default_queue)
        self._instance.report_engine_event("Creating Celery run worker job task", run, cls=self.__class__)
        task_id = str(uuid.uuid4())
        self._instance.add_run_tags(run.run_id, {DAGSTER_CELERY_TASK_ID_TAG: task_id})
        task_signature.apply_async(task_id=task_id, priority=_get_run_priority(run), queue=queue,
                                   routing_key=f"{queue}.{routing_key}")
        self._instance.report_engine_event(
            "Celery task has been forwarded to the broker.", run,
            EngineEventData({"Run ID": run.run_id, "Celery Task ID": task_id, "Celery Queue": queue}), cls=self.__class__)

    @property
    def supports_resume_run(self) -> bool:
        return False

    def _worker_of(self, run: Any) -> tuple[str | None, Any]:
        """(node name, pid) of the worker that started the run's task: the name from the task's
        STARTED state, else the run's WORKER_TAG (the worker writes it before it starts the run; the
        backend expires the state). Read only: a tag write from here (the daemon) would rewrite the
        stored run while the run itself adds its tags, and one of the two writes would be lost."""
        info = self.celery.AsyncResult(run.tags[DAGSTER_CELERY_TASK_ID_TAG]).info
        host = info.get("hostname") if isinstance(info, dict) else None
        return host or run.tags.get(WORKER_TAG), info.get("pid") if isinstance(info, dict) else None

    def check_run_worker_health(self, run: Any) -> CheckRunHealthResult:
        res = super().check_run_worker_health(run)
        if res.status in (WorkerStatus.SUCCESS, WorkerStatus.FAILED):
            self._misses.pop(run.run_id, None)
            return res
        host, pid = self._worker_of(run)
        if not host:
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"{res.msg or 'task started'}; its worker is not known yet")
        try:
            alive = bool(self.celery.control.ping(destination=[host], timeout=1.0))
        except Exception:  # noqa: BLE001 - the broker is down: nothing known about the worker
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the Celery broker did not answer a ping")
        if alive:
            self._misses.pop(run.run_id, None)
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        self._misses[run.run_id] = n = self._misses.get(run.run_id, 0) + 1
        if n < PING_MISSES:
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"Celery worker {host} missed a ping")
        self._misses.pop(run.run_id, None)
        return CheckRunHealthResult(WorkerStatus.FAILED,
                                    f"Celery worker {host}{f' (pid {pid})' if pid else ''} that started run "
                                    f"{run.run_id} does not answer: it died mid-run; the run is failed and retried")


# -- the executor -------------------------------------------------------------------------------
def _executor_def() -> Any:
    from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor, _submit_task  # noqa: PLC0415 - optional extra increments[celery]: dagster_celery only when used

    class PartitionRoutingCeleryExecutor(CeleryExecutor):
        def __init__(self, groups: int, **kw: Any) -> None:
            super().__init__(**kw)
            self.groups = groups

        def execute(self, plan_context: Any, execution_plan: Any) -> Any:
            """dagster-celery's loop; inside a run that is itself a Celery task (the run launched by
            CeleryRunLauncher on a warm worker) its result.get() of finished step tasks is allowed
            (Celery refuses it in a task by default: "Never call result.get() within a task",
            dagster-io/dagster#32915). Such a run holds its worker's pool process while its steps run:
            they need other workers (the partition groups' queues and `dagster`)."""
            import dagster_celery.core_execution_loop as loop  # noqa: PLC0415 - optional extra increments[celery]: dagster_celery only when used
            from celery.result import allow_join_result  # noqa: PLC0415 - optional extra increments[celery]: celery only when used
            loop.TICK_SECONDS = TICK_S
            groups = self.groups

            def submit(app, ctx, step, queue, priority, known_state):
                return _submit_task(app, ctx, step, partition_queue(step.key, groups) or queue, priority, known_state)
            with allow_join_result():
                yield from loop.core_celery_execution_loop(plan_context, execution_plan, step_execution_fn=submit)

    @dg.executor(name="increments_celery",
                 config_schema={**CELERY_CONFIG,
                                "partition_queues": dg.Field(int, is_required=False, default_value=2,
                                                             description="Partition groups: partition p goes to "
                                                                         "queue increments-p<p mod this>")},
                 requirements=dg.multiple_process_executor_requirements())
    def increments_celery_executor(init_context):
        """dagster-celery's executor; partition p of a fanned-out batch always to queue increments-p<p mod N>."""
        c = init_context.executor_config
        return PartitionRoutingCeleryExecutor(
            groups=max(1, int(c.get("partition_queues", 2))), broker=c.get("broker") or broker_url(),
            backend=(c.get("backend") if c.get("backend") not in (None, "rpc://") else backend_url()),
            include=c.get("include"), config_source={"task_default_queue": STEP_QUEUE, **(c.get("config_source") or {})},
            retries=RetryMode.from_config(c["retries"]))
    return increments_celery_executor


_EXECUTOR: list[Any] = []


def celery_executor() -> Any:
    """The executor of `@streaming_query(executor="celery")` (one definition per process)."""
    if not _EXECUTOR:
        _EXECUTOR.append(_executor_def())
    return _EXECUTOR[0]


# -- the worker command -------------------------------------------------------------------------
def worker_command(queues: list[str], name: str, concurrency: int = 1, loglevel: str = "INFO") -> list[str]:
    """`celery worker` on this app: the pool process stays up between tasks (prefork, no
    max-tasks-per-child), so imports and open state stores are paid once."""
    return [sys.executable, "-m", "celery", "-A", "orchestration.celery", "worker", "-Q", ",".join(queues),
            "-n", name, "-c", str(concurrency), "--pool", "prefork", "--without-gossip", "--without-mingle",
            "-l", loglevel]


def main(argv: list[str] | None = None) -> int:
    """python -m orchestration.celery worker [-Q q1,q2] [-n name@%h] [-c N]: a warm worker
    (INCREMENTS_WARM_STATE=1; needs DAGSTER_HOME, the instance the runs belong to). Default queue:
    increments-runs. Steps of executor="celery" queries need workers of their own (queues
    increments-p<g>,dagster): a run waiting for its steps holds its worker's pool process."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "worker":
        print(main.__doc__, file=sys.stderr)
        return 2
    opts = {"-Q": RUN_QUEUE, "-n": "increments@%h", "-c": "1"}    # runs only: a run waits on its steps' workers
    rest = args[1:]
    for i in range(0, len(rest) - 1, 2):
        opts[rest[i]] = rest[i + 1]
    if not os.environ.get("DAGSTER_HOME"):
        print("orchestration.celery worker: set DAGSTER_HOME to the Dagster instance the runs belong to "
              "(python -m orchestration.home <dir> --celery prepares one)", file=sys.stderr)
        return 2
    os.environ[WARM_ENV] = "1"
    os.environ["INCREMENTS_CELERY_WORKER"] = opts["-n"].replace("%h", socket.gethostname())
    cmd = worker_command(opts["-Q"].split(","), opts["-n"], int(opts["-c"]))
    os.execv(cmd[0], cmd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

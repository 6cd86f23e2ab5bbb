"""Every use of Dagster's private modules (`dagster._*`), in one place, for one Dagster release line.

Dagster's public API has no way to (a) queue a run from inside a run (the AvailableNow drain's
chain: one run per batch, no wait for a sensor tick), (b) record a drain as a backfill the Backfills
page lists and cancels, (c) read a sensor's stored on/off state, (d) walk a cron string backwards,
(e) report a Celery worker's health or read an executor's retry mode, run dagster-celery's tasks
(celery_tasks.py), (f) show a refused step's error as one line (refusal.py), (g) tag a batch's
input data versions (observations.py). What increments needs for
these is below and nowhere else: tests/orchestration/test_dagster_internals.py checks that no other
module imports `dagster._*`, that every name below resolves on the installed Dagster
(missing_internals: resolving them imports Dagster's storage modules, ~1 s, so the code location
does not do it at load), and that a Dagster outside SUPPORTED is refused at code location load
(`check_deployment`), naming the version and what to do.

Contract of the run helpers: a run is created from a job definition of the running code location
(or the running run's own snapshots) with its code origin, so the run queue daemon can launch it;
`submit` hands it to the instance's run coordinator, which must queue it (QueuedRunCoordinator):
the per-query tag limit then holds it until the query's run in flight ends.
"""
from __future__ import annotations

import datetime as _dt
import importlib
import os
import time
from typing import Any

import dagster
import yaml
from dagster import DagsterInstance

#: the Dagster release line whose private modules this file was written against (>= lo, < hi)
SUPPORTED = ((1, 13), (1, 14))

#: name -> "module:attribute" of every private name used (resolved lazily, checked by missing_internals)
INTERNALS = {
    "InstigatorStatus": "dagster._core.scheduler.instigation:InstigatorStatus",
    "InstigatorType": "dagster._core.scheduler.instigation:InstigatorType",
    "reverse_cron_string_iterator": "dagster._utils.schedules:reverse_cron_string_iterator",
    "DATA_VERSION_TAG": "dagster._core.definitions.data_version:DATA_VERSION_TAG",
    "CheckRunHealthResult": "dagster._core.launcher:CheckRunHealthResult",
    "WorkerStatus": "dagster._core.launcher:WorkerStatus",
    "RetryMode": "dagster._core.execution.retries:RetryMode",
    "PartitionBackfill": "dagster._core.execution.backfill:PartitionBackfill",
    "BulkActionStatus": "dagster._core.execution.backfill:BulkActionStatus",
    "BulkActionsFilter": "dagster._core.execution.backfill:BulkActionsFilter",
    "RemotePartitionSetOrigin": "dagster._core.remote_origin:RemotePartitionSetOrigin",
    "RemoteJobOrigin": "dagster._core.remote_origin:RemoteJobOrigin",
    "JobPythonOrigin": "dagster._core.origin:JobPythonOrigin",
    "partition_set_snap_name_for_job_name":
        "dagster._core.remote_representation.external_data:partition_set_snap_name_for_job_name",
    "make_new_backfill_id": "dagster._core.utils:make_new_backfill_id",
    "BACKFILL_ID_TAG": "dagster._core.storage.tags:BACKFILL_ID_TAG",
    "PARTITION_NAME_TAG": "dagster._core.storage.tags:PARTITION_NAME_TAG",
    "QueuedRunCoordinator": "dagster._core.run_coordinator.queued_run_coordinator:QueuedRunCoordinator",
    "AssetCheckExecutionsTable": "dagster._core.storage.event_log.schema:AssetCheckExecutionsTable",
    "BulkActionsTable": "dagster._core.storage.runs.schema:BulkActionsTable",
    "BackfillTagsTable": "dagster._core.storage.runs.schema:BackfillTagsTable",
    # observations.py: a batch's input data versions
    "get_input_data_version_tag": "dagster._core.definitions.data_version:get_input_data_version_tag",
    # refusal.py: a refused step's one-line error
    "DagsterUserCodeProcessError": "dagster._core.errors:DagsterUserCodeProcessError",
    "SerializableErrorInfo": "dagster._utils.error:SerializableErrorInfo",
    # celery_tasks.py: dagster-celery 0.29's tasks, mirrored
    "execute_run_command_body": "dagster._cli.api:_execute_run_command_body",
    "ReconstructableJob": "dagster._core.definitions.reconstruct:ReconstructableJob",
    "EngineEventData": "dagster._core.events:EngineEventData",
    "create_execution_plan": "dagster._core.execution.api:create_execution_plan",
    "execute_plan_iterator": "dagster._core.execution.api:execute_plan_iterator",
    "ExecuteRunArgs": "dagster._grpc.types:ExecuteRunArgs",
    "ExecuteStepArgs": "dagster._grpc.types:ExecuteStepArgs",
    "unpack_value": "dagster._serdes:unpack_value",
}
#: instance methods used that Dagster does not document as public
INSTANCE_METHODS = ("create_run", "create_run_for_job", "submit_run", "all_instigator_state", "add_backfill",
                    "update_backfill", "get_backfill", "get_backfills", "get_execution_plan_snapshot",
                    "get_job_snapshot", "add_run_tags", "delete_run", "run_coordinator", "purge_ticks",
                    "run_storage", "event_log_storage", "optimize_for_webserver")


class UnsupportedDagster(RuntimeError):
    """The installed Dagster is not the release line increments' orchestration was written for."""


def get(name: str) -> Any:
    module, attr = INTERNALS[name].split(":")
    return getattr(importlib.import_module(module), attr)


def __getattr__(name: str) -> Any:          # `from .dagster_internals import RetryMode`
    if name in INTERNALS:
        return get(name)
    raise AttributeError(name)


def dagster_version() -> tuple[int, ...]:
    parts = []
    for p in str(dagster.__version__).split(".")[:3]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def missing_internals() -> list[str]:
    """The private names and instance methods that do not resolve on the installed Dagster ([] = all do)."""
    missing = []
    for name, where in INTERNALS.items():
        try:
            get(name)
        except (ImportError, AttributeError):
            missing.append(f"{name} ({where})")
    missing += [f"DagsterInstance.{m}" for m in INSTANCE_METHODS if not hasattr(DagsterInstance, m)]
    return missing


def version_problem(check_names: bool = True) -> str | None:
    """Why the installed Dagster is not supported (None: it is). check_names=False: the release
    line only (what the code location checks at load: resolving every name imports Dagster's
    storage modules, ~1 s; the test resolves them)."""
    v = dagster_version()[:2]
    lo, hi = SUPPORTED
    if not (lo <= v < hi):
        return (f"dagster {dagster.__version__} is installed; increments' orchestration supports dagster "
                f">={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]} (orchestration/dagster_internals.py uses its private "
                f"modules). Install dagster {lo[0]}.{lo[1]}.x (pyproject.toml pins it)")
    missing = missing_internals() if check_names else []
    if missing:
        return (f"dagster {dagster.__version__} lacks what increments' orchestration uses: {', '.join(missing)}; "
                "install the version pyproject.toml pins")
    return None


def coordinator_problem(home: str | None = None) -> str | None:
    """Why the Dagster instance at `home` ($DAGSTER_HOME) cannot run increments' queries (None: it can).

    Batch runs are serialized per query by the run queue (QueuedRunCoordinator with the
    `increments/query` tag limit), and an AvailableNow drain queues its next batch's run from the
    run in flight, which only a queue can hold until that run ends. A run_coordinator that
    launches at once (DefaultRunCoordinator, SyncInMemoryRunCoordinator) would start two runs of a
    query together and cannot take a run submitted from a run. Read from dagster.yaml (the code
    location does not open the instance to load)."""
    home = home if home is not None else os.environ.get("DAGSTER_HOME")
    if not home:
        return None
    path = os.path.join(home, "dagster.yaml")
    if not os.path.exists(path):
        return None                              # Dagster's default is the QueuedRunCoordinator
    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    rc = cfg.get("run_coordinator") if isinstance(cfg, dict) else None
    if not isinstance(rc, dict) or not rc.get("class"):
        return None
    module, cls = rc.get("module") or "dagster._core.run_coordinator", rc["class"]
    if cls == "QueuedRunCoordinator" and module.startswith("dagster."):
        return None
    if cls in LAUNCH_AT_ONCE and module.startswith("dagster."):
        return _refusal(path, module, cls)
    try:                                         # another class: is it a QueuedRunCoordinator?
        klass = getattr(importlib.import_module(module), cls)
    except Exception as e:  # noqa: BLE001 - the instance itself will fail to load; say why here too
        return f"{path}: run_coordinator {module}.{cls} does not import ({type(e).__name__}: {e})"
    if isinstance(klass, type) and issubclass(klass, get("QueuedRunCoordinator")):
        return None
    return _refusal(path, module, cls)


LAUNCH_AT_ONCE = ("DefaultRunCoordinator", "SyncInMemoryRunCoordinator")


def _refusal(path: str, module: str, cls: str) -> str:
    return (f"{path} sets run_coordinator {module}.{cls}, which launches each run at once: increments needs "
            "Dagster's run queue (QueuedRunCoordinator, Dagster's default) so that one run per query is in "
            "flight (concurrency.runs.tag_concurrency_limits on increments/query) and an AvailableNow drain can "
            "queue its next batch's run. Remove the run_coordinator section (orchestration/dagster.yaml shows "
            "the settings increments ships)")


def check_deployment() -> None:
    """At code location load: refuse an unsupported Dagster or a run coordinator that cannot
    serialize a query's runs, with the reason (UnsupportedDagster)."""
    problem = version_problem(check_names=False) or coordinator_problem()
    if problem:
        raise UnsupportedDagster(problem)


# -- runs ---------------------------------------------------------------------------------------
def queued_coordinator(instance: Any) -> bool:
    return isinstance(instance.run_coordinator, get("QueuedRunCoordinator"))


def run_of_same_job(context: Any, tags: dict[str, str], status: Any) -> Any:
    """A new run of the running run's job (its snapshots, config and code origin), or None when
    the run has no code origin (execute_in_process)."""
    inst, run = context.instance, context.dagster_run
    if run.remote_job_origin is None or run.job_snapshot_id is None or run.execution_plan_snapshot_id is None:
        return None
    return inst.create_run(
        job_name=run.job_name, run_id=None, run_config=run.run_config, status=status, tags=tags,
        root_run_id=None, parent_run_id=None, step_keys_to_execute=None,
        execution_plan_snapshot=inst.get_execution_plan_snapshot(run.execution_plan_snapshot_id),
        job_snapshot=inst.get_job_snapshot(run.job_snapshot_id), parent_job_snapshot=None, asset_selection=None,
        asset_check_selection=None, resolved_op_selection=None, op_selection=None,
        remote_job_origin=run.remote_job_origin, job_code_origin=run.job_code_origin,
        asset_graph=context.repository_def.asset_graph)   # for the run's planned materialization events


def run_of_job(context: Any, job_name: str, tags: dict[str, str], status: Any) -> Any:
    """A new run of another job of the running code location (e.g. the batch job, from the drain
    job's run), or None when the run has no code origin."""
    run = context.dagster_run
    if run.remote_job_origin is None or run.job_code_origin is None:
        return None
    origin = get("RemoteJobOrigin")(repository_origin=run.remote_job_origin.repository_origin, job_name=job_name)
    code = get("JobPythonOrigin")(job_name, run.job_code_origin.repository_origin)
    return context.instance.create_run_for_job(
        job_def=context.repository_def.get_job(job_name), status=status, tags=tags,
        remote_job_origin=origin, job_code_origin=code)


def submit(instance: Any, run_id: str) -> None:
    """Hand a NOT_STARTED run to the run queue (QueuedRunCoordinator: no workspace needed)."""
    instance.submit_run(run_id, workspace=None)


def sensor_stopped(instance: Any, sensor_name: str) -> bool:
    """Was the sensor stopped from the UI (a stored state that says so)?"""
    try:
        states = instance.all_instigator_state(instigator_type=get("InstigatorType").SENSOR)
    except Exception:  # noqa: BLE001 - advisory: treat as running when the state cannot be read
        return False
    stopped = get("InstigatorStatus").STOPPED
    return any(st.name == sensor_name and st.status == stopped for st in states)


def last_cron_tick(cron: str, now_s: float, tz: str = "UTC") -> float:
    """The timestamp of the last tick of `cron` at or before `now_s`."""
    return next(get("reverse_cron_string_iterator")(now_s, cron, tz)).timestamp()


POOLED = "_increments_pooled"          # set on an instance whose storages keep pooled connections
POOL_OVERFLOW = 4                       # connections beyond the pooled one while a run's threads write at once


def pool_connections(instance: Any, max_overflow: int = POOL_OVERFLOW) -> bool:
    """Keep one open connection per storage of `instance` for the rest of this process (what the
    webserver does, DagsterInstance.optimize_for_webserver), once per instance; True the first time.

    dagster-postgres storages open a new PostgreSQL connection for every statement (NullPool): a
    run process pays a connect for each of its ~50 events (2-3 statements each, ~20-40 ms on a
    loaded machine against ~5 ms on an open connection). A batch run's first op pools them, so
    its events and its run tags are written on open connections, which close with the run's
    process (dagster-postgres' dispose leaves its engines open: the webserver's pools end the
    same way). Storages without a pool (SQLite, in memory) are left as they are (Dagster's
    methods do nothing for them)."""
    if getattr(instance, POOLED, False):
        return False
    instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=max_overflow)
    try:
        setattr(instance, POOLED, True)
    except AttributeError:  # pragma: no cover - an instance class with __slots__: pooled once per call
        pass
    return True


# -- backfills ----------------------------------------------------------------------------------
def new_job_backfill(context: Any, anchor_job: str, partition_names: list[str], tags: dict[str, str],
                     title: str, description: str) -> Any:
    """Record (and return) a job backfill of the code location's partitioned job `anchor_job`
    whose partitions are all "submitted" already: the backfill daemon only follows the runs
    tagged with its id, cancels the queued ones when cancelled, and completes it when none is
    left unfinished. None when the run has no code origin."""
    run = context.dagster_run
    if run.remote_job_origin is None:
        return None
    origin = get("RemotePartitionSetOrigin")(
        repository_origin=run.remote_job_origin.repository_origin,
        partition_set_name=get("partition_set_snap_name_for_job_name")(anchor_job))
    bf = get("PartitionBackfill")(
        backfill_id=get("make_new_backfill_id")(), status=get("BulkActionStatus").REQUESTED, from_failure=False,
        tags=tags, backfill_timestamp=time.time(), title=title, description=description,
        partition_set_origin=origin, partition_names=list(partition_names),
        last_submitted_partition_name=partition_names[-1] if partition_names else None)
    context.instance.add_backfill(bf)
    return bf


def backfill(instance: Any, backfill_id: str) -> Any:
    return instance.get_backfill(backfill_id)


def backfills_tagged(instance: Any, tags: dict[str, str], limit: int = 5) -> list[Any]:
    return list(instance.get_backfills(filters=get("BulkActionsFilter")(tags=tags), limit=limit))


def backfill_state(bf: Any) -> str:
    """'open' (requested), 'cancelling', or 'ended' (completed, failed, cancelled)."""
    s = get("BulkActionStatus")
    if bf is None:
        return "ended"
    if bf.status == s.REQUESTED:
        return "open"
    if bf.status in (s.CANCELING, s.FAILING):
        return "cancelling"
    return "ended"


def set_backfill_partitions(instance: Any, backfill_id: str, names: list[str], description: str | None = None) -> None:
    """Replace the backfill's partition list (all of them "submitted") and, optionally, its description."""
    bf = instance.get_backfill(backfill_id)
    if bf is None or not names:
        return
    bf = bf._replace(partition_names=list(names), last_submitted_partition_name=names[-1])
    if description is not None:
        bf = bf._replace(description=description)
    instance.update_backfill(bf)


# -- retention (retention.py) ---------------------------------------------------------------------
def _sql_storage(storage: Any, attr: str) -> Any:
    inner = getattr(storage, "_storage", None)            # storage: {postgres: ...} wraps the SQL storages
    return getattr(inner, attr) if inner is not None and hasattr(inner, attr) else storage


def delete_check_executions(instance: Any, run_ids: list[str]) -> int:
    """Delete the asset check executions recorded by these runs (instance.delete_run leaves them)."""
    if not run_ids:
        return 0
    t = get("AssetCheckExecutionsTable")
    with _sql_storage(instance.event_log_storage, "event_log_storage").index_connection() as conn:
        return conn.execute(t.delete().where(t.c.run_id.in_(run_ids))).rowcount or 0


def delete_backfills(instance: Any, backfill_ids: list[str]) -> int:
    """Delete backfill records and their tags (Dagster has no API that deletes a backfill)."""
    if not backfill_ids:
        return 0
    bt, tt = get("BulkActionsTable"), get("BackfillTagsTable")
    with _sql_storage(instance.run_storage, "run_storage").connect() as conn:
        conn.execute(tt.delete().where(tt.c.backfill_id.in_(backfill_ids)))
        return conn.execute(bt.delete().where(bt.c.key.in_(backfill_ids))).rowcount or 0


def ended_backfills_before(instance: Any, tags: dict[str, str], before_s: float, limit: int = 500) -> list[str]:
    """Ids of ended backfills with these tags created before `before_s`."""
    s = get("BulkActionStatus")
    ended = [s.COMPLETED, s.COMPLETED_SUCCESS, s.COMPLETED_FAILED, s.FAILED, s.CANCELED]
    f = get("BulkActionsFilter")(tags=tags, statuses=ended,
                                 created_before=_dt.datetime.fromtimestamp(before_s, _dt.timezone.utc))
    return [b.backfill_id for b in instance.get_backfills(filters=f, limit=limit)]


def purge_ticks(instance: Any, names: set[str], before_s: float) -> int:
    """Delete the ticks older than `before_s` of the sensors and schedules named; how many instigators."""
    n = 0
    for st in instance.all_instigator_state():
        if st.name in names:
            instance.purge_ticks(st.instigator_origin_id, st.selector_id, before_s)
            n += 1
    return n


#: an index Dagster's schema lacks: its latest-check-execution query (the asset page's check status)
#: is max(id) per (asset_key, check_name), a scan of every execution of the check without it
CHECK_INDEX = "increments_check_executions_latest"


def ensure_storage_indexes(instance: Any) -> bool:
    """Create CHECK_INDEX on the event log's asset_check_executions if missing (once; it blocks
    writes to that table while it builds: seconds for a million rows). True if it was created."""
    import sqlalchemy as sa  # noqa: PLC0415 - sqlalchemy: kept off the code location's import path
    storage = _sql_storage(instance.event_log_storage, "event_log_storage")
    with storage.index_connection() as conn:
        dialect = conn.engine.dialect.name
        if dialect == "postgresql":
            exists = conn.execute(sa.text("SELECT 1 FROM pg_indexes WHERE indexname = :n"), {"n": CHECK_INDEX}).first()
        else:
            exists = conn.execute(sa.text("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = :n"),
                                  {"n": CHECK_INDEX}).first()
        if exists:
            return False
        conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {CHECK_INDEX} ON asset_check_executions "
                             "(asset_key, check_name, id)"))
    return True

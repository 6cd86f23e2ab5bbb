"""Bounded Dagster history: job `increments_retention` and its daily schedule (off by default).

A query with a one-minute trigger makes 1,440 runs a day; each run's events (~50 for a batch), its
asset check executions (one per check), the drains' backfills and the trigger sensor's ticks stay
in Dagster's storage until deleted. With `retention_days=N` (build_definitions(...,
retention_days=N), a module's RETENTION_DAYS, or $INCREMENTS_RETENTION_DAYS) the schedule
`increments_retention_schedule` runs daily and deletes, for the code location's queries:
    runs that ended more than N days ago (tag increments/query: batch, drain and migrate runs;
    increments/maintenance: compaction runs), with their events
    (instance.delete_run) and their asset check executions (which delete_run leaves behind),
    except each query's newest committed batch run (its sink keeps a latest materialization);
    the drains' backfill records that ended more than N days ago;
    the ticks older than N days of the location's sensors and schedules;
    the retention job's own runs older than N days.
It never touches the SQL batch log (offsets, commits, drains): `increments history` reads that.
Its first run also adds an index Dagster's schema lacks (dagster_internals.CHECK_INDEX): the asset
page's latest status of a check otherwise scans every execution of that check (2.6 s at 200k
batches, bench/dagster_history_scale.py).
Without retention_days the schedule is stopped; launching the job asks for retention_days.
The shipped dagster.yaml also sets Dagster's own tick retention (`retention:`).
"""
from __future__ import annotations

import datetime
import os
import time
from typing import Any

import dagster as dg

from . import dagster_internals as di
from .dagster_internals import CHECK_INDEX, ensure_storage_indexes
from .maintenance import MAINTENANCE_TAG
from .ops import OUTCOME_TAG, QUERY_TAG, redacted_errors

JOB = "increments_retention"
SCHEDULE = "increments_retention_schedule"
CRON = "17 3 * * *"
PAGE = 500


def retention_days_setting(value: int | None = None) -> int | None:
    """The configured retention in days (None: off): the argument, else $INCREMENTS_RETENTION_DAYS."""
    if value is None and os.environ.get("INCREMENTS_RETENTION_DAYS"):
        value = int(os.environ["INCREMENTS_RETENTION_DAYS"])
    if value is not None and int(value) < 1:
        raise ValueError(f"retention_days={value}: keep at least 1 day of Dagster history (or leave it unset: off)")
    return None if value is None else int(value)


def purge(instance: Any, queries: list[str], instigators: set[str], days: float, now_s: float | None = None,
          log: Any = None) -> dict[str, int]:
    """Delete what is older than `days` (module doc); counts of what was deleted."""
    cutoff = (now_s if now_s is not None else time.time()) - days * 86400.0
    before = _dt(cutoff)
    out = {"runs": 0, "check_executions": 0, "backfills": 0, "instigators_purged": 0}
    for q in queries:
        newest = instance.get_run_records(dg.RunsFilter(tags={QUERY_TAG: q, OUTCOME_TAG: "committed"}), limit=1)
        keep = {r.dagster_run.run_id for r in newest}
        for tag in (QUERY_TAG, MAINTENANCE_TAG):     # batch, drain and migrate runs; compaction runs
            out_q = _delete_runs(instance, dg.RunsFilter(tags={tag: q}, statuses=FINISHED, updated_before=before),
                                 keep)
            for k, v in out_q.items():
                out[k] += v
        while True:
            ids = di.ended_backfills_before(instance, {QUERY_TAG: q}, cutoff, PAGE)
            if not ids:
                break
            out["backfills"] += di.delete_backfills(instance, ids)
    own = _delete_runs(instance, dg.RunsFilter(job_name=JOB, statuses=FINISHED, updated_before=before), set())
    for k, v in own.items():
        out[k] += v
    out["instigators_purged"] = di.purge_ticks(instance, instigators, cutoff)
    if log is not None:
        log.info(f"retention {days} days: deleted {out['runs']} runs with their events, "
                 f"{out['check_executions']} check executions, {out['backfills']} backfills; purged the ticks of "
                 f"{out['instigators_purged']} sensors/schedules")
    return out


FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


def _dt(ts: float) -> Any:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)


def _delete_runs(instance: Any, filters: Any, keep: set[str]) -> dict[str, int]:
    out = {"runs": 0, "check_executions": 0}
    while True:
        ids = [r.dagster_run.run_id for r in instance.get_run_records(filters, limit=PAGE + len(keep), ascending=True)]
        ids = [i for i in ids if i not in keep]
        if not ids:
            return out
        out["check_executions"] += di.delete_check_executions(instance, ids)
        for run_id in ids:
            instance.delete_run(run_id)
            out["runs"] += 1


def make_retention(queries: list[str], instigators: set[str], retention_days: int | None) -> dg.Definitions:
    """The job and its schedule (running daily when retention_days is set, stopped otherwise)."""
    days = retention_days_setting(retention_days)

    @dg.op(name="purge_old_history", description="Delete what is older than retention_days (orchestration/retention.py); "
                                                 "never the SQL batch log",
           config_schema={"retention_days": dg.Field(float, description=(
               "Delete Dagster runs (with their events and check executions), drain backfills and ticks older than "
               "this many days"))})
    @redacted_errors
    def purge_op(context):
        if ensure_storage_indexes(context.instance):
            context.log.info(f"created index {CHECK_INDEX} on asset_check_executions (the checks' latest status)")
        counts = purge(context.instance, queries, instigators | {SCHEDULE}, context.op_config["retention_days"],
                       log=context.log)
        context.add_output_metadata(dict(counts))
        return counts

    @dg.job(name=JOB, executor_def=dg.in_process_executor,
            description="Bounded Dagster history for the streaming queries of this code location: runs, their events "
                        "and check executions, drain backfills and ticks older than retention_days (the SQL batch "
                        "log is kept).")
    def retention_job():
        purge_op()

    run_config = {"ops": {"purge_old_history": {"config": {"retention_days": days}}}} if days else None
    schedule = dg.ScheduleDefinition(
        name=SCHEDULE, cron_schedule=CRON, job=retention_job, run_config=run_config,
        default_status=dg.DefaultScheduleStatus.RUNNING if days else dg.DefaultScheduleStatus.STOPPED,
        description=(f"Daily: delete Dagster history older than {days} days" if days else
                     "Off: set retention_days (build_definitions / RETENTION_DAYS / $INCREMENTS_RETENTION_DAYS) to "
                     "delete Dagster history older than that every day"))
    return dg.Definitions(jobs=[retention_job], schedules=[schedule])

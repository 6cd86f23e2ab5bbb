"""An AvailableNow drain as one Dagster unit: a backfill on the Backfills page, one run per batch.

Starting a drain (job `<q>_available_now`, from its schedule's tick, the launchpad or a sensor)
records a job backfill of `<q>_drain` titled "AvailableNow drain of <q>": its partitions are the
drain's batches ("batch N" .. the estimate: each source's backlog over its rate limit), its runs
are `<q>_batch` runs tagged dagster/backfill=<id> and dagster/partition="batch N", and the start run
(the schedule tick's run) carries the backfill's tag too, so tick -> run -> backfill. The
backfill's status bar shows N of M; M becomes exact when the drain ends (the trailing no-data batch
of time-based work included, as Spark runs it).

Chaining (one run per batch, one in flight; needs Dagster's run queue, refused at load otherwise:
dagster_internals.check_deployment):
    start run:   backfill recorded; batch N's run queued (the query's tag limit holds it)
    run N plan:  first, the run of batch N+1 is created, not submitted ("not started": it keeps
                 the backfill open and Dagster's cancel does not touch it); then run N takes its own
                 dagster/backfill tag off (value "") so a cancel of the backfill does not
                 terminate it mid-batch
    run N commit: tag back; the drain goes on and the backfill is open -> run N+1 is submitted
                 (queued behind run N); the drain is done or the backfill cancelled -> run N+1 is
                 deleted and the partition list trimmed to the batches that ran
Cancel (the backfill's Cancel button): Dagster cancels the queued run of the next batch at once;
the batch in flight commits; then the backfill shows Canceled and the drain is recorded
`cancelled` (increments_drains; `increments history`). A run that starts after the cancel plans
nothing. A batch that fails for good (the query halts) fails its partition: the backfill ends
failed; the drain itself stays active and resumes, outside the backfill, once the query does.
Runs without a code origin (execute_in_process) are not chained; the trigger sensor requests a
drain's next batch whenever a chained request was lost (drain_request).
"""
from __future__ import annotations

import math
from typing import Any

import dagster as dg

from . import dagster_internals as di
from .ops import BATCH_TAG, CHAINED_TAG, DRAIN_TAG, QUERY_TAG

BACKFILL_TAG = "dagster/backfill"
PARTITION_TAG = "dagster/partition"
DRAIN_BACKFILL_TAG = "increments/drain_backfill"    # the drain's backfill, kept while the run is in flight
OUT_OF_BACKFILL = ""                                # dagster/backfill of a drain run in flight


def partition_name(batch_id: int) -> str:
    return f"batch {batch_id}"


def batch_of(name: str) -> int:
    return int(name.split()[-1])


def drain_tags(backfill_id: str, batch_id: int, drain_id: str) -> dict[str, str]:
    return {BATCH_TAG: str(batch_id), DRAIN_TAG: drain_id, DRAIN_BACKFILL_TAG: backfill_id,
            BACKFILL_TAG: backfill_id, PARTITION_TAG: partition_name(batch_id)}


def estimate_batches(rt: Any) -> int:
    """How many batches the drain's targets need at the sources' rate limits (at least 1):
    each source's backlog (files or offsets pending) over its max_*_per_trigger; a source that
    cannot tell counts 1. An estimate: the partition list grows or is trimmed as batches run."""
    last = rt.log.latest_offsets()
    n = 1
    for i, src in enumerate(rt.sources):
        start = last.end.get(str(i)) if last is not None and last.end else src.initial_offset()
        try:
            backlog = src.backlog(start) or {}
        except Exception:  # noqa: BLE001 - an estimate
            continue
        pending = backlog.get("files_pending", backlog.get("offsets_pending"))
        limit = getattr(src, "max_files_per_trigger", None) or getattr(src, "max_offsets_per_trigger", None)
        if isinstance(pending, int) and isinstance(limit, int) and limit > 0:
            n = max(n, math.ceil(pending / limit))
    return n


def start_backfill(context: Any, spec: Any, drain_id: str, first_batch: int, estimate: int) -> str | None:
    """In the run of `<q>_available_now`, before the drain is recorded active: record the drain's
    backfill, tag this run with it and queue batch `first_batch`'s run. Its id (None: no
    backfill, e.g. a run without a code origin; the trigger sensor then runs the drain)."""
    inst = context.instance
    if not di.queued_coordinator(inst):
        return None
    names = [partition_name(first_batch + i) for i in range(max(1, estimate))]
    own = context.dagster_run.tags
    tags = {QUERY_TAG: spec.name, DRAIN_TAG: drain_id, "increments/drain_start_run": context.run_id,
            **{k: own[k] for k in ("dagster/schedule_name", "dagster/sensor_name", "user") if k in own}}
    bf = di.new_job_backfill(context, f"{spec.key}_drain", names, tags, f"AvailableNow drain of {spec.name}"[:100],
                             f"AvailableNow drain {drain_id} of query {spec.name}: one {spec.key}_batch run per batch "
                             f"from batch {first_batch}, about {len(names)} batches (the sources' backlog at their "
                             "rate limits). Cancel stops it after the batch in flight commits.")
    if bf is None:
        return None
    bid = bf.backfill_id
    inst.add_run_tags(context.run_id, {BACKFILL_TAG: bid, DRAIN_BACKFILL_TAG: bid})
    job = context.repository_def.get_job(f"{spec.key}_batch")
    run = di.run_of_job(context, job.name, {**job.tags, **drain_tags(bid, first_batch, drain_id),
                                            CHAINED_TAG: context.run_id},
                        dg.DagsterRunStatus.NOT_STARTED)
    if run is not None:
        di.submit(inst, run.run_id)
    return bid


def _holder(inst: Any, backfill_id: str, batch_id: int) -> Any:
    runs = inst.get_runs(dg.RunsFilter(tags={DRAIN_BACKFILL_TAG: backfill_id, BATCH_TAG: str(batch_id)},
                                       statuses=[dg.DagsterRunStatus.NOT_STARTED]), limit=1)
    return runs[0] if runs else None


def begin_batch(context: Any, spec: Any) -> str | None:
    """First thing in a drain run's plan step: create the next batch's run (not started) and take
    this run out of its backfill's cancel. Returns why this run must plan nothing (its drain's
    backfill was cancelled or ended), else None. Not a drain backfill's run: None, nothing done."""
    tags = context.dagster_run.tags
    bid = tags.get(DRAIN_BACKFILL_TAG)
    if not bid or tags.get(BATCH_TAG) is None:
        return None
    inst = context.instance
    bf = di.backfill(inst, bid)
    state = di.backfill_state(bf)
    if state != "open":
        return f"the drain's backfill {bid} is {bf.status.value.lower() if bf else 'gone'}: this run plans nothing"
    nxt = int(tags[BATCH_TAG]) + 1
    if _holder(inst, bid, nxt) is None:
        new = {CHAINED_TAG: context.run_id, **drain_tags(bid, nxt, tags.get(DRAIN_TAG, ""))}
        di.run_of_same_job(context, new, dg.DagsterRunStatus.NOT_STARTED)
    inst.add_run_tags(context.run_id, {BACKFILL_TAG: OUT_OF_BACKFILL})
    return None


def end_batch(context: Any, spec: Any, failed: bool = False) -> None:
    """A drain run that commits nothing (idle: the drain is done; refused; cancelled before it
    planned) stays out of its backfill; one that failed for good is put back in it (the backfill
    ends failed). Either way the drain's next run is deleted and the partition list trimmed."""
    tags = context.dagster_run.tags
    bid = tags.get(DRAIN_BACKFILL_TAG)
    if not bid or tags.get(BATCH_TAG) is None:
        return
    inst = context.instance
    if failed:
        inst.add_run_tags(context.run_id, {BACKFILL_TAG: bid})
    _drop_next(inst, bid, int(tags[BATCH_TAG]) + 1)
    _trim(inst, bid, int(tags[BATCH_TAG]) - (0 if failed else 1))


def after_commit(context: Any, spec: Any, batch_id: int, nxt: tuple[int, str] | None) -> str | None:
    """In the commit step of batch `batch_id`: put the run back in its drain's backfill; queue the
    next batch's run when the drain goes on (`nxt`), else delete it. The queued run's id, or None."""
    tags = context.dagster_run.tags
    bid = tags.get(DRAIN_BACKFILL_TAG)
    if not bid:
        return submit_next_batch(context, spec, *nxt) if nxt is not None else None
    inst = context.instance
    inst.add_run_tags(context.run_id, {BACKFILL_TAG: bid})
    bf = di.backfill(inst, bid)
    go_on = nxt is not None and di.backfill_state(bf) == "open" and not paused(context, spec)
    if not go_on:
        _drop_next(inst, bid, batch_id + 1)
        _trim(inst, bid, batch_id, bf)
        return None
    run = _holder(inst, bid, batch_id + 1)
    if run is None:
        run = di.run_of_same_job(context, {CHAINED_TAG: context.run_id, **drain_tags(bid, batch_id + 1, nxt[1])},
                                 dg.DagsterRunStatus.NOT_STARTED)
        if run is None:
            return None
    inst.add_run_tags(run.run_id, {**context.job_def.tags, CHAINED_TAG: context.run_id})
    _extend(inst, bid, batch_id + 1, bf)
    di.submit(inst, run.run_id)
    return run.run_id


def drain_cancelled(context: Any) -> bool:
    """Was the backfill of this run's drain cancelled (the drain stops after this batch)?"""
    bid = context.dagster_run.tags.get(DRAIN_BACKFILL_TAG)
    return bool(bid) and di.backfill_state(di.backfill(context.instance, bid)) != "open" and \
        di.backfill(context.instance, bid).status.value in ("CANCELING", "CANCELED")


def paused(context: Any, spec: Any) -> bool:
    if di.sensor_stopped(context.instance, f"{spec.key}_trigger"):
        context.log.info(f"sensor {spec.key}_trigger is stopped: the drain pauses after this batch")
        return True
    return False


def _drop_next(inst: Any, backfill_id: str, batch_id: int) -> None:
    run = _holder(inst, backfill_id, batch_id)
    if run is not None:
        inst.delete_run(run.run_id)


def _trim(inst: Any, backfill_id: str, last_batch: int, bf: Any = None) -> None:
    """The partition list ends at the drain's last batch."""
    bf = bf or di.backfill(inst, backfill_id)
    names = [n for n in (bf.partition_names or []) if batch_of(n) <= last_batch] if bf else []
    if names and names != list(bf.partition_names):
        di.set_backfill_partitions(inst, backfill_id, names)


def _extend(inst: Any, backfill_id: str, batch_id: int, bf: Any = None) -> None:
    """The partition list reaches at least batch `batch_id` (the estimate was short)."""
    bf = bf or di.backfill(inst, backfill_id)
    names = list(bf.partition_names or []) if bf else []
    if names and batch_of(names[-1]) < batch_id:
        di.set_backfill_partitions(inst, backfill_id, names + [partition_name(b) for b in
                                                               range(batch_of(names[-1]) + 1, batch_id + 1)])


def drain_backfill(instance: Any, drain_id: str) -> Any:
    """The newest backfill recorded for the drain (None: none)."""
    found = di.backfills_tagged(instance, {DRAIN_TAG: drain_id}, limit=1)
    return found[0] if found else None


def drain_request_tags(instance: Any, drain_id: str, batch_id: int) -> dict[str, str] | None:
    """The tags of the trigger sensor's request for a drain's batch (catching up a lost chain):
    the drain's backfill's when it is open (its not-started run of that batch is deleted: the
    request replaces it), plain drain tags when it has none or it ended; None when the backfill
    was cancelled (the drain stops)."""
    bf = drain_backfill(instance, drain_id)
    if bf is None:
        return {DRAIN_TAG: drain_id}
    state = di.backfill_state(bf)
    if state == "cancelling" or (state == "ended" and bf.status.value == "CANCELED"):
        return None
    if state == "ended":
        return {DRAIN_TAG: drain_id}
    _drop_next(instance, bf.backfill_id, batch_id)
    return drain_tags(bf.backfill_id, batch_id, drain_id)


def submit_next_batch(context: Any, spec: Any, batch_id: int, drain_id: str) -> str | None:
    """A drain without a backfill (one resumed after a halt, or started without a code origin):
    queue the run of `batch_id` from this run's own job; its run id (None: not chained)."""
    if context.dagster_run.job_name != f"{spec.key}_batch" or paused(context, spec):
        return None
    tags = {**context.job_def.tags, BATCH_TAG: str(batch_id), DRAIN_TAG: drain_id, CHAINED_TAG: context.run_id}
    run = di.run_of_same_job(context, tags, dg.DagsterRunStatus.NOT_STARTED)
    if run is None:
        return None
    di.submit(context.instance, run.run_id)
    return run.run_id

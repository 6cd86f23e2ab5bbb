"""The trigger sensor of a query: requests the next batch run (one at a time), or reports a halt.

Each tick (at most every `sensor_interval_s`, >= 5 s, the processing-time interval when larger):
    a run of the query in flight (queued .. started)           -> skip
    the last batch run failed and Dagster will retry it        -> skip (the retry redoes the batch)
    the last batch run failed for good (its steps' retries,
      or the run retries of a crash, are used up)              -> halted: skip, naming the batch, file,
                                                                  line and error; cursor "halted at
                                                                  batch N (F, line L), run <id8>" (the
                                                                  tick history's Cursor column); the
                                                                  webhook is called once
    an AvailableNow drain is active                            -> request batch N with the drain
    processing_time trigger and new data / time-based work     -> request batch N
    ... no new data, but a file a batch read changed since
      (the plan's read-files window check, side-effect free)   -> request batch N: its plan fails naming
                                                                  the file, the query halts; with
                                                                  fail_on_data_loss=False (or a window of
                                                                  0: no plan checks) no run, the skip
                                                                  reason names the file
    otherwise                                                  -> skip (nothing to do)
    the query cannot be built (e.g. its upstream Delta table
      does not exist yet)                                      -> skip, naming the error
Refused runs do not count as "the last batch run". A halt ends when a launch of `<q>_batch` (no
batch id) or a Materialize of the sink asset commits: the launch redoes the failed batch. The request
carries run tag increments/batch_id=N (a stale copy of it is refused once N is committed) and run key `<q>-b<N>-a<k>`, k = how many runs of
batch N exist. During a drain, the drain's start run queues its first batch and each commit the next (chain.py);
this sensor catches up when a chained request was lost, and records a drain whose backfill was
cancelled as `cancelled`.
Sources are asked side-effect free (backlog) here.
"""
from __future__ import annotations

import json
from typing import Any

import dagster as dg

from increments.redaction import redact

from . import runner
from .assets import trigger_text
from .chain import drain_request_tags
from .ops import BATCH_TAG, DRAIN_TAG, ERROR_TAG, OUTCOME_TAG, QUERY_TAG, error_location

IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def in_flight(instance: Any, query: str) -> bool:
    return bool(instance.get_run_records(dg.RunsFilter(tags={QUERY_TAG: query}, statuses=IN_FLIGHT), limit=1))


def last_batch_run(instance: Any, spec: Any) -> Any:
    """The newest batch run of the query that was not refused (None: no such run): a run of
    `<q>_batch`, or of Dagster's asset job (a Materialize of the sink), whose plan tagged it."""
    recs = instance.get_run_records(dg.RunsFilter(tags={QUERY_TAG: spec.name}), limit=25)
    for r in recs:
        run = r.dagster_run
        if run.job_name != f"{spec.key}_batch" and OUTCOME_TAG not in run.tags:
            continue                 # the drain, compact or migrate job
        if run.tags.get(OUTCOME_TAG) != "refused":
            return run
    return None


def _retried(instance: Any, run: Any) -> bool:
    """Was the failed run relaunched already (a retry that was then refused, e.g.)?"""
    return bool(instance.get_run_records(dg.RunsFilter(tags={"dagster/parent_run_id": run.run_id}), limit=1))


def retry_pending(instance: Any, spec: Any) -> bool:
    run = last_batch_run(instance, spec)
    return bool(run and run.status == dg.DagsterRunStatus.FAILURE and run.tags.get("dagster/will_retry") == "true"
                and not _retried(instance, run))


def halt_state(instance: Any, spec: Any) -> dict[str, Any] | None:
    """{'run_id', 'batch_id', 'error', ...} when the query's last batch run failed for good."""
    run = last_batch_run(instance, spec)
    if run is None or run.status != dg.DagsterRunStatus.FAILURE:
        return None
    will_retry = run.tags.get("dagster/will_retry")
    if will_retry == "true" or (will_retry is None and instance.run_retries_enabled):   # a retry may come
        return None
    error = run.tags.get(ERROR_TAG) or _failure_message(instance, run.run_id)
    return {"query": spec.name, "run_id": run.run_id, "batch_id": run.tags.get(BATCH_TAG),
            "error": error, "attempts": int(run.tags.get("dagster/retry_number", "0")) + 1,
            "resume": f"fix the cause, then launch job {spec.key}_batch (no batch id)"
                      + (f" or Materialize {spec.sink_key.to_user_string()}" if getattr(spec, "sink_key", None) else "")}


def _failure_message(instance: Any, run_id: str) -> str:
    """The run's failure event message (a crashed run has no error tag)."""
    try:
        recs = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE, limit=1).records
        if recs:
            return recs[0].event_log_entry.dagster_event.message or "the run failed"
    except Exception:  # noqa: BLE001
        pass
    return "the run failed (see its page)"


def halt_text(h: dict[str, Any]) -> str:
    """'query q is HALTED at batch N (file F, line L): <error>. ... To resume, ...' (one line)."""
    batch = f"at batch {h['batch_id']}" if h.get("batch_id") is not None else "(a batch failed)"
    loc = error_location(h["error"] or "")
    at = f" (file {loc['file']}, line {loc['line']})" if loc else ""
    return (f"query {h['query']} is HALTED {batch}{at}: {h['error']}. Run {h['run_id'][:8]} failed after its "
            f"retries; no batch runs until it is fixed. To resume, {h['resume']}.")


def halt_cursor(h: dict[str, Any]) -> str:
    """The sensor's cursor while the query is halted, shown in each tick's row of its history:
    'halted at batch N (file F, line L), run <id>' (the webhook is called when it changes)."""
    loc = error_location(h["error"] or "")
    at = f" ({loc['file'].rsplit('/', 1)[-1]}, line {loc['line']})" if loc else ""
    return f"halted at batch {h.get('batch_id')}{at}, run {h['run_id'][:8]}"


def notify(url: str, payload: dict[str, Any], timeout: float = 5.0) -> None:
    """POST the halt as JSON to the user's webhook."""
    import urllib.request  # noqa: PLC0415 - urllib.request (http.client, email): only the halt webhook needs it, kept off the code location's import path
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        resp.read()


def batch_request(spec: Any, instance: Any, batch_id: int, drain_id: str | None,
                  drain_tags: dict[str, str] | None = None) -> dg.RunRequest:
    k = len(instance.get_run_ids(dg.RunsFilter(tags={QUERY_TAG: spec.name, BATCH_TAG: str(batch_id)})))
    tags = {BATCH_TAG: str(batch_id), **(drain_tags or {})}
    if drain_id:
        tags[DRAIN_TAG] = drain_id
    return dg.RunRequest(run_key=f"{spec.key}-b{batch_id}-a{k + 1}", tags=tags)


def make_sensor(spec: Any, job: dg.JobDefinition) -> dg.SensorDefinition:
    status = dg.DefaultSensorStatus.RUNNING if spec.sensor_status == "running" else dg.DefaultSensorStatus.STOPPED

    @dg.sensor(name=f"{spec.key}_trigger", job=job, minimum_interval_seconds=spec.sensor_interval_s,
               default_status=status,
               description=f"Trigger of streaming query {spec.name} ({trigger_text(spec.trigger)}): requests the "
                           "next batch run when none is in flight and there is work (or a drain is active); "
                           "stops requesting (halted) when a batch failed after its retries.")
    def trigger(context):
        from increments.checkpoint.drains import DrainLog  # noqa: PLC0415 - increments.checkpoint.drains (sqlalchemy): kept off the code location's import path
        if in_flight(context.instance, spec.name):
            return dg.SkipReason(f"a run of query {spec.name} is in flight")
        if retry_pending(context.instance, spec):
            return dg.SkipReason(f"the last run of query {spec.name} failed and will be retried")
        halt = halt_state(context.instance, spec)
        if halt is not None:
            state = halt_cursor(halt)
            if context.cursor != state:
                try:
                    if spec.halt_webhook:
                        notify(spec.halt_webhook, {"event": "halted", **halt})
                    context.update_cursor(state)
                except Exception as e:  # noqa: BLE001 - tried again next tick
                    context.log.warning(redact(f"halt webhook {spec.halt_webhook} failed: {e!r}"))
            return dg.SkipReason(halt_text(halt))
        if (context.cursor or "").startswith("halted"):
            context.update_cursor("resumed")
        try:
            rt = runner.build_runtime(spec.writer_factory, spec.path, staging="memory")
        except Exception as e:  # noqa: BLE001 - e.g. the upstream Delta table does not exist yet
            return dg.SkipReason(redact(f"query {spec.name} cannot start yet: {type(e).__name__}: {e}"))
        try:
            nxt, redo = runner.next_batch_id(rt)
            drain = DrainLog.for_runtime(rt).active()
            if drain is not None:            # a lost chain (chain.py): the drain's backfill's tags
                tags = drain_request_tags(context.instance, drain.drain_id, nxt)
                if tags is None:
                    DrainLog.for_runtime(rt).finish(drain.drain_id, "cancelled")
                    return dg.SkipReason(f"query {spec.name}: AvailableNow drain {drain.drain_id} was cancelled "
                                         "(its backfill); it stops here")
                return batch_request(spec, context.instance, nxt, drain.drain_id, tags)
            if spec.trigger.kind != "processing_time":
                return dg.SkipReason(f"query {spec.name} ({trigger_text(spec.trigger)}): no active drain; start one "
                                     f"with job {spec.key}_available_now or its schedule")
            if redo or runner.pending_work(rt):
                return batch_request(spec, context.instance, nxt, None)
            changed = runner.changed_since_read(rt)     # a file read before that changed since
            if any(fails for fails, _ in changed):
                return batch_request(spec, context.instance, nxt, None)     # its plan fails naming it
            kept = "".join(f"; {msg}" for _, msg in changed)
            return dg.SkipReason(redact(f"query {spec.name}: no new data and no time-based work after batch "
                                        f"{nxt - 1}{kept}"))
        finally:
            runner.close_quietly(rt)

    return trigger

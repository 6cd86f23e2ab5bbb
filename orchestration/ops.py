"""The batch job's ops: plan -> read -> process -> write -> commit, thin calls into
increments.execution.steps. Data between ops is staged on disk in the checkpoint (DiskStaging), so
each op could run in its own process; each op re-loads batch N's plan from the log and refuses
unless this Dagster run owns offsets[N] (steps.load_plan). rt.run_id is the Dagster run id.

Outcomes (tag increments/outcome) and the run's status in the runs list:
    committed   Success: the batch was committed (the sink's materialization, partition = batch id)
    refused     Canceled: the run may not run this batch (see runner.refusal) or lost the log's
                fence in a later step; nothing applied, never retried
    idle        Canceled: nothing to do (no new data, no time-based work); never retried
    failed      Failure: a step still failed after its retries: the query halts (sensors.py); the
                check `batch_errors` on the sink fails with the error
Refused and idle runs carry increments/reason, also the run's cancel message. Each op retries with exponential backoff
(spec.max_retries, spec.retry_delay_s); a retry rebuilds the run's runtime from the log. After a
commit during an AvailableNow drain with more to do, the commit op queues the next batch run
(chain.py): the drain runs at the pace of its runs, one run in flight.
Heavy libraries are imported inside the ops only.
"""
from __future__ import annotations

import re
from typing import Any

import dagster as dg

from increments.redaction import redact

QUERY_TAG = "increments/query"
BATCH_TAG = "increments/batch_id"
OFFSETS_TAG = "increments/offsets"      # not set any more (metadata `offsets`); kept for old runs' readers
OUTCOME_TAG = "increments/outcome"
REASON_TAG = "increments/reason"
ERROR_TAG = "increments/error"
DRAIN_TAG = "increments/drain_id"
ATTEMPT_TAG = "increments/attempt"      # not set any more (metadata `attempt`); kept for old runs' readers
CHAINED_TAG = "increments/after_run"
ERRORS_CHECK = "batch_errors"

PLAN_CONFIG = {
    "batch_id": dg.Field(dg.Noneable(int), default_value=None,
                         description="Run only if this is the next uncommitted batch (empty: the next batch)."),
    "drain_id": dg.Field(dg.Noneable(str), default_value=None,
                         description="The AvailableNow drain whose targets cap this batch (empty: the active "
                                     "drain of an available_now query, else none)."),
}


def _rt(spec: Any, context: Any) -> Any:
    from . import runner
    return runner.runtime_for_run(spec.key, spec.writer_factory, spec.path, context.run_id)


def _tag(context: Any, tags: dict[str, Any]) -> None:
    context.instance.add_run_tags(context.run_id, {k: str(v)[:1000] for k, v in tags.items()})


def _active_drain(spec: Any, rt: Any, drain_id: str | None) -> Any:
    from increments.checkpoint.drains import DrainLog
    drains = DrainLog.for_runtime(rt)
    if drain_id:
        d = drains.get(drain_id)
        return d if d is not None and d.active else None
    return drains.active() if spec.trigger.kind == "available_now" else None


def retry_policy(spec: Any) -> dg.RetryPolicy:
    return dg.RetryPolicy(max_retries=spec.max_retries, delay=spec.retry_delay_s, backoff=dg.Backoff.EXPONENTIAL)


def error_location(text: str) -> dict[str, Any]:
    """{'file': ..., 'line': N} when the engine's error names them ("file F, line N")."""
    m = re.search(r"file (\S+?),? line (\d+)", text)
    return {"file": m.group(1), "line": int(m.group(2))} if m else {}


def end_without_batch(context: Any, spec: Any, outcome: str, reason: str, batch_id: int | None = None) -> None:
    """End the run as Canceled (grey in the runs list: it applied nothing) with outcome refused or
    idle and the reason as tags and as the run's message. Never retried: Dagster retries failed
    runs only, and the step's Failure disallows step retries."""
    from . import runner
    short = re.sub(r"^query '[^']*' \(id [^)]*\),?\s*", "", reason)      # the run's tags name the query
    _tag(context, {OUTCOME_TAG: outcome, REASON_TAG: short[:200],
                   **({BATCH_TAG: batch_id} if batch_id is not None else {})})
    runner.release_run(spec.key, context.run_id)
    context.instance.report_run_canceling(context.dagster_run, message=f"{outcome}: {reason}")
    raise dg.Failure(description=f"{outcome}: {reason} (the run ends as Canceled; it applied nothing)",
                     allow_retries=False)


def refuse(context: Any, spec: Any, reason: str, batch_id: int | None) -> None:
    context.log.warning(f"refused: {reason}")
    end_without_batch(context, spec, "refused", reason, batch_id)


def guarded(spec: Any, context: Any, step: str, batch_id: int | None, fn: Any) -> Any:
    """Run one step: (True, result); a run that lost the log's fence is refused (ends Canceled).
    Any other error: the runtime is dropped (a retry rebuilds it from the log); on the last
    attempt the batch's failure is recorded (tags, failed check on the sink); then dg.Failure."""
    from increments.errors import ConcurrentRunError
    from . import runner
    try:
        return fn()
    except ConcurrentRunError as e:
        refuse(context, spec, str(e), batch_id)
        raise
    except dg.Failure:
        raise
    except Exception as e:  # noqa: BLE001 - turned into a Dagster failure below
        runner.release_run(spec.key, context.run_id)
        where = f"query {spec.name}" + (f", batch {batch_id}" if batch_id is not None else "")
        text = redact(f"{type(e).__name__}: {e}")
        attempt, last = context.retry_number + 1, context.retry_number >= spec.max_retries
        md = {**({"batch_id": batch_id} if batch_id is not None else {}), "step": step, "attempt": attempt,
              "error": dg.MetadataValue.text(text[:4000]), **error_location(text)}
        if last:
            record_halt(context, spec, batch_id, step, text, md)
        raise dg.Failure(description=f"{where}, step {step} (attempt {attempt} of {spec.max_retries + 1}): {text}",
                         metadata=md) from e


def record_halt(context: Any, spec: Any, batch_id: int | None, step: str, text: str, md: dict[str, Any]) -> None:
    _tag(context, {OUTCOME_TAG: "failed", ERROR_TAG: f"step {step}: {text}",
                   **({BATCH_TAG: batch_id} if batch_id is not None else {})})
    context.log_event(dg.AssetCheckEvaluation(
        asset_key=spec.sink_key, check_name=spec.check_name(ERRORS_CHECK), passed=False,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"batch {batch_id} failed in step {step} after {spec.max_retries + 1} attempts; query "
                    f"{spec.name} is halted. Fix the cause, then launch {spec.key}_batch (no config) to resume.",
        metadata={**md, "dagster_run": dg.MetadataValue.dagster_run(context.run_id)}))


def make_ops(spec: Any) -> dict[str, dg.OpDefinition]:
    """The five ops of one query's batch job (op names are prefixed by the query key)."""
    k = spec.key
    policy = retry_policy(spec)

    @dg.op(name=f"{k}__plan", config_schema=PLAN_CONFIG, out=dg.Out(dict, is_required=False), retry_policy=policy,
           description="Decide the batch from the log (redo or next); write offsets[N] first.")
    def plan_op(context):
        from . import runner
        from increments.checkpoint.drains import DrainLog
        wanted = context.op_config.get("batch_id")
        rt, plan, drain = guarded(spec, context, "plan", wanted, lambda: _plan(spec, context, wanted))
        if isinstance(plan, str):                      # refused before planning
            refuse(context, spec, plan, wanted)
        if plan is None:
            msg = f"{rt.where()}: nothing to do (no new data, no time-based work)"
            if drain is not None:
                DrainLog.for_runtime(rt).finish(drain.drain_id)
                context.log_event(drain_observation(spec, drain.drain_id, "done", drain.batches))
                msg += f"; AvailableNow drain {drain.drain_id} is done"
            context.log.info(msg)
            end_without_batch(context, spec, "idle", "no new data, no time-based work"
                              + (f"; drain {drain.drain_id} done" if drain is not None else ""))
        # run tags are what users filter the runs list by (query, batch, drain, outcome); the offsets
        # and the attempt are metadata (this step's output, the sink's materialization)
        tags = {OUTCOME_TAG: "running", BATCH_TAG: plan.batch_id}
        if drain is not None:
            DrainLog.for_runtime(rt).record_batch(drain.drain_id, plan.batch_id)
            tags[DRAIN_TAG] = drain.drain_id
        _tag(context, tags)
        context.log.info(f"{rt.where(plan.batch_id)}: {'redo (attempt %d)' % plan.entry.attempt if plan.redo else 'new'}"
                         f" batch, offsets {runner.offsets_text(plan.entry)}")
        yield dg.Output({"batch_id": plan.batch_id, "drain_id": drain.drain_id if drain else None},
                        metadata={"batch_id": plan.batch_id, "redo": plan.redo, "attempt": plan.entry.attempt,
                                  "offsets": runner.offsets_text(plan.entry)})

    def _step(name: str, fn_name: str, desc: str):
        @dg.op(name=f"{k}__{name}", ins={"batch": dg.In(dict)}, out=dg.Out(dict, is_required=False),
               retry_policy=policy, description=desc)
        def step_op(context, batch: dict):
            from increments.execution import steps

            def run():
                rt = _rt(spec, context)
                return getattr(steps, fn_name)(rt, steps.load_plan(rt, batch["batch_id"]))
            info = guarded(spec, context, name, batch["batch_id"], run)
            return dg.Output(batch, metadata=_step_metadata(info))
        return step_op

    @dg.op(name=f"{k}__commit", ins={"batch": dg.In(dict)}, retry_policy=policy,
           description="Write commits[N]; record lineage; during a drain, queue the next batch run.")
    def commit_op(context, batch: dict):
        from increments.execution import steps
        from . import runner

        def run():
            rt = _rt(spec, context)
            done = rt.log.get_commit(batch["batch_id"])
            if done is not None and (done.extra or {}).get("run_id") == context.run_id:
                return None      # an earlier attempt of this step wrote commits[N], then failed
            plan = steps.load_plan(rt, batch["batch_id"])
            return (rt, plan, *steps.commit_batch(rt, plan))
        res = guarded(spec, context, "commit", batch["batch_id"], run)
        _tag(context, {OUTCOME_TAG: "committed"})
        if res is None:
            context.log.warning(f"batch {batch['batch_id']} was committed by an earlier attempt of this step; "
                                "its lineage was not recorded")
            runner.release_run(k, context.run_id)
            return
        try:      # the batch is committed: what follows is bookkeeping, never a reason to fail or retry
            nxt = after_commit(spec, context, batch, *res)
        except Exception as e:  # noqa: BLE001
            context.log.warning(f"batch {batch['batch_id']} is committed; recording its lineage failed: {e!r}")
            nxt = None
        finally:
            runner.release_run(k, context.run_id)
        if nxt is not None:
            from .chain import submit_next_batch
            try:
                run_id = submit_next_batch(context, spec, *nxt)
            except Exception as e:  # noqa: BLE001 - the sensor requests the batch on its next tick
                context.log.warning(f"could not queue the next batch run ({e!r}); the trigger sensor will")
                run_id = None
            if run_id:
                context.log.info(f"queued run {run_id} for batch {nxt[0]} of AvailableNow drain {nxt[1]}")

    ops = {"plan": plan_op,
           "read": _step("read", "read_batch", "Read (start, end] of every source; stage the rows."),
           "process": _step("process", "process_batch", "Operators over the rows; state N-1 -> N."
                            + (f" Not fanned out per state partition: {spec.fanout_reason}."
                               if spec.fanout_reason and "fanout is off" not in spec.fanout_reason else "")),
           "write": _step("write", "write_batch", "sink.add_batch(N): idempotent per batch."),
           "commit": commit_op}
    if spec.fanout:
        from .fanout import make_fanout_ops
        ops.update(make_fanout_ops(spec, policy))
    return ops


def _plan(spec: Any, context: Any, wanted: int | None) -> tuple[Any, Any, Any]:
    """(runtime, plan | None (idle) | refusal text, drain)."""
    from increments.errors import ConcurrentRunError
    from increments.execution import steps
    from . import runner
    rt = _rt(spec, context)
    reason = runner.refusal(rt, wanted)
    if reason:
        return rt, reason, None
    drain = _active_drain(spec, rt, context.op_config.get("drain_id"))
    if drain is not None:
        runner.restore_drain(rt, drain)
    try:
        plan = steps.plan_batch(rt, limited=spec.trigger.kind != "once")
    except ConcurrentRunError as e:
        return rt, str(e), drain
    if plan is not None:
        rt.staging.put_json(plan.batch_id, "plan", plan.durations_ms)
    return rt, plan, drain


def after_commit(spec: Any, context: Any, batch: dict, rt: Any, plan: Any, entry: Any,
                 progress: dict) -> tuple[int, str] | None:
    """Lineage and checks of committed batch N; (N + 1, drain id) when its drain goes on."""
    from increments.checkpoint.drains import DrainLog
    from . import health, runner
    from .assets import partitions_name
    from .metadata import materialization_metadata
    rec = runner.lineage(rt, plan, entry, progress)
    pk = spec.partition_key(plan.batch_id)
    if pk is not None:
        context.instance.add_dynamic_partitions(partitions_name(spec.sink_key), [pk])
    context.log_event(dg.AssetMaterialization(
        asset_key=spec.sink_key, partition=pk, description=f"batch {plan.batch_id} of query {spec.name}",
        metadata=materialization_metadata(rt, rec, progress, context.run_id, context.instance)))
    for rule, (passed, meta, desc) in health.evaluate(rt, plan.batch_id).items():
        context.log_event(dg.AssetCheckEvaluation(
            asset_key=spec.sink_key, check_name=spec.check_name(rule), passed=passed, metadata=meta,
            description=desc, severity=dg.AssetCheckSeverity.WARN))
    from .freshness import commit_evaluation
    context.log_event(commit_evaluation(spec, rt))
    context.log_event(dg.AssetCheckEvaluation(
        asset_key=spec.sink_key, check_name=spec.check_name(ERRORS_CHECK), passed=True,
        severity=dg.AssetCheckSeverity.ERROR, description=f"batch {plan.batch_id} committed",
        metadata={"batch_id": plan.batch_id, "dagster_run": dg.MetadataValue.dagster_run(context.run_id)}))
    drain_id = batch.get("drain_id")
    if not drain_id:
        return None
    drains = DrainLog.for_runtime(rt)
    drain = drains.get(drain_id)
    if drain is None or not drain.active:
        return None
    if runner.drain_has_more(rt, drain):
        return plan.batch_id + 1, drain_id
    drains.finish(drain_id)
    context.log.info(f"{rt.where()}: AvailableNow drain {drain_id} reached its target; done")
    context.log_event(drain_observation(spec, drain_id, "done", drain.batches))   # plan counted this batch
    return None


def drain_observation(spec: Any, drain_id: str, state: str, batches: int) -> dg.AssetObservation:
    return dg.AssetObservation(asset_key=spec.sink_key, metadata={"drain_id": drain_id, "drain_state": state,
                                                                  "drain_batches": batches})


def _step_metadata(info: Any) -> dict[str, Any]:
    """The op's output metadata from its step's result (ReadResult, ProcessResult or WriteResult)."""
    from increments.execution.step_results import ProcessResult, ReadResult
    if isinstance(info, ReadResult):
        return {"num_input_rows": info.num_input_rows, "duration_ms": info.get_batch_ms}
    if isinstance(info, ProcessResult):
        return {"state_versions": dg.MetadataValue.json(info.state_versions), "duration_ms": info.process_ms}
    return {"num_output_rows": info.num_output_rows, "duration_ms": info.add_batch_ms,
            "sink_version": "-" if info.sink_version is None else str(info.sink_version),
            "skipped_replay": info.skipped_replay}


def lineage_metadata(rec: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The batch's own entries of the sink materialization (orchestration/metadata.py)."""
    from .metadata import batch_metadata
    return batch_metadata(rec, run_id)

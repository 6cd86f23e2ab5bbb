"""The batch job's ops: plan -> read -> process -> write -> commit, thin calls into
increments.execution.steps. Data between ops is staged on disk in the checkpoint (DiskStaging), so
each op could run in its own process; each op re-loads batch N's plan from the log and refuses
unless this Dagster run owns offsets[N] (steps.load_plan). rt.run_id is the Dagster run id.

A run asks for a batch with its tags increments/batch_id (and increments/drain_id): the trigger
sensor and the drain chain set them; a launch without them runs the next batch (wanted_batch).

Outcomes (tag increments/outcome) and the run's status in the runs list:
    committed   Success: the batch was committed (the sink's materialization, tag and metadata batch_id)
    idle        Success: nothing to do (no new data, no time-based work): plan yields no output, the
                later steps are skipped, tag increments/reason says so; nothing applied
    refused     Failure in one step (commit, with the reason; read .. write skipped): the run may not run this
                batch (see runner.refusal: a committed or future batch id, a re-execution of a
                committed batch's run) or lost the log's fence in a later step; nothing applied,
                never retried
    failed      Failure: a step still failed after its retries: the query halts (sensors.py); the
                check `batch_errors` on the sink fails with the error
Refused and idle runs carry increments/reason. Each op retries with exponential backoff
(spec.max_retries, spec.retry_delay_s); a retry rebuilds the run's runtime from the log. After a
commit during an AvailableNow drain with more to do, the commit op queues the next batch run
(chain.py): the drain runs at the pace of its runs, one run in flight.
Heavy libraries are imported inside the ops only (in a run's process, preload.py imports them in the
background while Dagster starts the run); the first op keeps the instance's connections open
(dagster_internals.pool_connections).
"""
from __future__ import annotations

import functools
import re
from typing import Any

import dagster as dg

from increments.errors import ConcurrentRunError
from increments.redaction import redact, redacted_exception

from . import health, preload, runner
from .dagster_internals import pool_connections
from .expectations import evaluations, failure_evaluation
from .refusal import refusal

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


def query_pool(spec: Any) -> str:
    """The query's concurrency pool, on its plan and commit ops. With the shipped dagster.yaml
    (`concurrency.pools: granularity: run, default_limit: 1`) the run queue holds a run while
    another run needing the same pool is in flight: one run per query, also for a Materialize
    from the asset graph (Dagster's asset job carries no job tags, so the tag limit on
    increments/query cannot see it when it is queued). Only plan and commit carry it: under op
    granularity (another instance's settings) the partition ops of a fanned-out batch still run
    side by side."""
    return f"increments/{spec.name}"


def _rt(spec: Any, context: Any) -> Any:
    return runner.runtime_for_run(spec.key, spec.writer_factory, spec.path, context.run_id)


def _op_start(context: Any) -> None:
    """First thing in each op: the engine's modules imported in the background while the run
    started are ready (preload.py), and this process's storages keep open connections for the
    rest of the run (dagster_internals.pool_connections: the op's events and tags are written
    without a PostgreSQL connect each; once per process)."""
    preload.wait()
    try:
        pool_connections(context.instance)
    except Exception as e:  # noqa: BLE001 - only a speed-up: the run goes on with Dagster's connections
        context.log.warning(f"could not keep the instance's database connections open ({e!r}); each event connects")


def _tag(context: Any, tags: dict[str, Any]) -> None:
    context.instance.add_run_tags(context.run_id, {k: str(v)[:1000] for k, v in tags.items()})


def _active_drain(spec: Any, rt: Any, drain_id: str | None) -> Any:
    from increments.checkpoint.drains import DrainLog  # noqa: PLC0415 - increments.checkpoint.drains (sqlalchemy): kept off the code location's import path
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


def location_metadata(text: str) -> dict[str, str]:
    """error_location as metadata: text (a file and a line number are not metrics to plot)."""
    return {k: str(v) for k, v in error_location(text).items()}


def _short(reason: str) -> str:
    return re.sub(r"^query '[^']*' \(id [^)]*\),?\s*", "", reason)      # the run's tags name the query


def mark_idle(context: Any, spec: Any, reason: str) -> None:
    """Nothing to do: tag the run (outcome idle, the reason) and end the plan step without its
    outputs, so every later step is skipped and the run succeeds (no failure, nothing applied)."""
    _tag(context, {OUTCOME_TAG: "idle", REASON_TAG: f"nothing to do: {_short(reason)}"[:200]})
    runner.release_run(spec.key, context.run_id)


def refusal_tags(context: Any, spec: Any, reason: str, batch_id: int | None) -> None:
    _tag(context, {OUTCOME_TAG: "refused", REASON_TAG: _short(reason)[:200],
                   **({BATCH_TAG: batch_id} if batch_id is not None else {})})
    runner.release_run(spec.key, context.run_id)


def refuse(context: Any, spec: Any, reason: str, batch_id: int | None) -> None:
    """A later step lost the log's fence: fail this step with the reason (never retried)."""
    refusal_tags(context, spec, reason, batch_id)
    raise refusal(f"refused: {_short(reason)}")


def redacted_errors(fn: Any) -> Any:
    """An op body (not a generator) whose error reaches Dagster redacted: Dagster stores a failed
    step's exception with its chain (messages and stacks), so a stand-in with redacted messages
    (increments.redaction.redacted_exception) is raised instead of one that carries a secret.
    The batch steps get this from `guarded`; the compact, migrate, purge and drain-start ops wear it."""

    @functools.wraps(fn)
    def op_body(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (dg.Failure, dg.RetryRequested):
            raise                    # ours: built from redacted text, chains redacted by guarded
        except Exception as e:  # noqa: BLE001 - re-raised below, redacted
            clean = redacted_exception(e)
            if clean is e:
                raise
        raise clean                  # outside the handler: no implicit context to the raw error
    return op_body


def guarded(spec: Any, context: Any, step: str, batch_id: int | None, fn: Any) -> Any:
    """Run one step: (True, result); a run that lost the log's fence is refused (the step fails, never retried).
    Any other error: the runtime is dropped (a retry rebuilds it from the log); on the last
    attempt the batch's failure is recorded (tags, failed check on the sink); then dg.Failure."""
    try:
        return fn()
    except ConcurrentRunError as e:
        refuse(context, spec, redact(str(e)), batch_id)
        raise
    except dg.Failure:
        raise
    except Exception as e:  # noqa: BLE001 - turned into a Dagster failure below
        runner.release_run(spec.key, context.run_id)
        where = f"query {spec.name}" + (f", batch {batch_id}" if batch_id is not None else "")
        text = redact(f"{type(e).__name__}: {e}")
        attempt, last = context.retry_number + 1, context.retry_number >= spec.max_retries
        md = {**({"batch_id": str(batch_id)} if batch_id is not None else {}), "step": step, "attempt": str(attempt),
              "error": dg.MetadataValue.text(text[:4000]), **location_metadata(text)}
        if last:
            try:                      # an on_violation="fail" expectation: its blocking check fails
                failed_check = failure_evaluation(spec, e, batch_id)
            except Exception:  # noqa: BLE001 - the halt below is what must be recorded
                failed_check = None
            if failed_check is not None:
                context.log_event(failed_check)
            record_halt(context, spec, batch_id, step, text, md)
        # (the failure's cause is stored with the step's failure: its chain redacted too)
        raise dg.Failure(description=f"{where}, step {step} (attempt {attempt} of {spec.max_retries + 1}): {text}",
                         metadata=md) from redacted_exception(e)


def record_halt(context: Any, spec: Any, batch_id: int | None, step: str, text: str, md: dict[str, Any]) -> None:
    from .chain import end_batch  # noqa: PLC0415 - cycle: orchestration.chain -> orchestration.ops
    try:
        end_batch(context, spec, failed=True)        # a drain's backfill shows the failed batch
    except Exception as e:  # noqa: BLE001 - the halt below is what must be recorded
        context.log.warning(redact(f"could not record the failure in the drain's backfill: {e!r}"))
    _tag(context, {OUTCOME_TAG: "failed", ERROR_TAG: f"step {step}: {text}",
                   **({BATCH_TAG: batch_id} if batch_id is not None else {})})
    where = error_location(text)
    at = f" ({where['file']}, line {where['line']})" if where else ""
    desc = (f"query {spec.name} is halted: batch {batch_id} failed in step {step}{at} after "
            f"{spec.max_retries + 1} attempts. Fix the cause, then launch {spec.key}_batch (or Materialize "
            f"{spec.sink_key.to_user_string()}) to resume.")
    md = {**md, "dagster_run": dg.MetadataValue.dagster_run(context.run_id)}
    context.log_event(dg.AssetCheckEvaluation(
        asset_key=spec.sink_key, check_name=spec.check_name(ERRORS_CHECK), passed=False,
        severity=dg.AssetCheckSeverity.ERROR, description=desc, metadata=md))
    # the asset's event history says it too (an observation: the table did not change)
    context.log_event(dg.AssetObservation(asset_key=spec.sink_key, description=desc,
                                          metadata={"query_state": "halted", "halt_reason": dg.MetadataValue.text(desc),
                                                    **md}))


def wanted_batch(context: Any) -> tuple[int | None, str | None, str | None]:
    """(batch id, drain id, refusal) a run asks for: its tags increments/batch_id and
    increments/drain_id (set by the sensor, the drain chain, or by hand in the launchpad); a
    re-execution of a run without them asks for its parent's batch, so re-running a committed
    batch's run is refused instead of running the next batch. None: the next batch."""
    tags = context.dagster_run.tags
    raw, drain = tags.get(BATCH_TAG), tags.get(DRAIN_TAG)
    if raw is None and tags.get("dagster/parent_run_id"):
        parent = context.instance.get_run_by_id(tags["dagster/parent_run_id"])
        if parent is not None:
            raw, drain = parent.tags.get(BATCH_TAG), drain or parent.tags.get(DRAIN_TAG)
    if raw is None or raw == "":
        return None, drain, None
    try:
        return int(raw), drain, None
    except ValueError:
        return None, drain, f"run tag {BATCH_TAG}={raw!r} is not a batch id (an integer); remove it to run the next batch"


def make_ops(spec: Any) -> dict[str, dg.OpDefinition]:
    """The ops of one query's batch graph (op names are prefixed by the query key):
    plan -> read -> process -> write -> commit; plan's `refused` output goes to commit too."""
    k = spec.key
    policy = retry_policy(spec)
    job = f"{k}_batch"

    @dg.op(name=f"{k}__plan", retry_policy=policy, pool=query_pool(spec),
           out={"batch": dg.Out(dict, is_required=False,
                                description="The planned batch (absent when there is nothing to do or the run is refused)"),
                "refused": dg.Out(str, is_required=False,
                                  description="Why this run may not run a batch (to commit, which fails with it)")},
           description="Decide the batch from the log (redo or next); write offsets[N] first. Nothing to do: no "
                       "output (the later steps are skipped, the run succeeds, tag increments/outcome=idle). A "
                       "launch that may not run (a committed or future batch id): only `refused` (read .. write are "
                       "skipped; commit fails with the reason).")
    def plan_op(context):
        _op_start(context)
        from increments.checkpoint.drains import DrainLog  # noqa: PLC0415 - increments.checkpoint.drains (sqlalchemy): kept off the code location's import path
        if context.dagster_run.tags.get(QUERY_TAG) != spec.name:     # a Materialize runs Dagster's asset job
            _tag(context, {QUERY_TAG: spec.name})
        wanted, drain_id, bad = wanted_batch(context)
        from . import chain  # noqa: PLC0415 - cycle: orchestration.chain -> orchestration.ops
        stop = chain.begin_batch(context, spec)     # a drain backfill's run: the next run created, out of cancel
        if stop:
            context.log.info(stop)
            chain.end_batch(context, spec)
            mark_idle(context, spec, stop)
            return
        if bad:
            refusal_tags(context, spec, bad, None)
            yield dg.Output(f"query {spec.name}: {bad}", "refused")
            return
        rt, plan, drain = guarded(spec, context, "plan", wanted, lambda: _plan(spec, context, wanted, drain_id))
        if isinstance(plan, str):                      # refused before planning
            context.log.warning(f"refused: {plan}")
            refusal_tags(context, spec, plan, wanted)
            yield dg.Output(f"query {spec.name}: {_short(plan)}", "refused")
            return
        if plan is None:
            msg = f"{rt.where()}: nothing to do (no new data, no time-based work)"
            if drain is not None:
                DrainLog.for_runtime(rt).finish(drain.drain_id)
                context.log_event(drain_observation(spec, drain.drain_id, "done", drain.batches))
                msg += f"; AvailableNow drain {drain.drain_id} is done"
            context.log.info(msg + "; the later steps are skipped")
            chain.end_batch(context, spec)
            mark_idle(context, spec, "no new data, no time-based work"
                      + (f"; drain {drain.drain_id} done" if drain is not None else ""))
            return
        # run tags are what users filter the runs list by (query, batch, drain, outcome); the offsets
        # and the attempt are metadata (this step's output, the sink's materialization)
        tags = {OUTCOME_TAG: "running", BATCH_TAG: plan.batch_id}
        if drain is not None:
            DrainLog.for_runtime(rt).record_batch(drain.drain_id, plan.batch_id)
            tags[DRAIN_TAG] = drain.drain_id
        _tag(context, tags)
        context.log.info(f"{rt.where(plan.batch_id)}: {'redo (attempt %d)' % plan.entry.attempt if plan.redo else 'new'}"
                         f" batch, offsets {runner.offsets_text(plan.entry)}")
        yield dg.Output({"batch_id": plan.batch_id, "drain_id": drain.drain_id if drain else None}, "batch",
                        metadata={"batch_id": plan.batch_id, "redo": plan.redo, "attempt": plan.entry.attempt,
                                  "offsets": runner.offsets_text(plan.entry)})

    def _step(name: str, fn_name: str, desc: str):
        @dg.op(name=f"{k}__{name}", ins={"batch": dg.In(dict)}, out=dg.Out(dict, is_required=False),
               retry_policy=policy, description=desc)
        def step_op(context, batch: dict):
            _op_start(context)
            from increments.execution import steps  # noqa: PLC0415 - increments.execution.steps (duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path

            def run():
                rt = _rt(spec, context)
                return getattr(steps, fn_name)(rt, steps.load_plan(rt, batch["batch_id"]))
            info = guarded(spec, context, name, batch["batch_id"], run)
            return dg.Output(batch, metadata=_step_metadata(info))
        return step_op

    @dg.op(name=f"{k}__commit", retry_policy=policy, pool=query_pool(spec),
           ins={"batch": dg.In(dg.List[dg.Any], description="[the written batch] or [plan's refusal]: one of "
                                                              "them (a fan-in, so a refusal skips no step twice)")},
           out={"result": dg.Out(dg.Nothing, is_required=False,
                                 description="The sink's materialization: one per committed batch")},
           description="Write commits[N]; the sink's materialization with the batch's lineage, the health "
                       "checks; during a drain, queue the next batch run. When plan refused the launch, the "
                       "only failing step: the reason and what to launch instead (never retried).")
    def commit_op(context, batch: list):
        _op_start(context)
        from increments.execution import steps  # noqa: PLC0415 - increments.execution.steps (duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path
        if len(batch) != 1 or isinstance(batch[0], str):       # plan refused: read .. write were skipped
            raise refusal(next((b for b in batch if isinstance(b, str)), "refused"))
        batch = batch[0]

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
        md, events, nxt, prov = {"batch_id": str(batch["batch_id"])}, [], None, {}
        try:      # the batch is committed: what follows is bookkeeping, never a reason to fail or retry
            md, events, nxt = after_commit(spec, context, batch, *res)
            prov = provenance(spec, context.instance, *res[:3])
        except Exception as e:  # noqa: BLE001
            context.log.warning(f"batch {batch['batch_id']} is committed; recording its lineage failed: {e!r}")
        finally:
            runner.release_run(k, context.run_id)
        if spec.shared_sink:     # the table is one asset of several queries' jobs: recorded as an event
            context.log_event(dg.AssetMaterialization(
                asset_key=spec.sink_key, description=f"batch {batch['batch_id']} of query {spec.name}", metadata=md))
        else:                    # this job materializes the sink asset: the output is the materialization
            yield dg.Output(None, "result", metadata=md, tags=prov.get("tags") or None,
                            data_version=dg.DataVersion(prov["version"]) if prov.get("version") else None)
        for ev in own_evaluations(context, events):   # after the materialization: they evaluate this batch
            context.log_event(ev)
        from . import chain  # noqa: PLC0415 - cycle: orchestration.chain -> orchestration.ops
        try:                     # a drain: queue the next batch's run (chain.py)
            run_id = chain.after_commit(context, spec, batch["batch_id"], nxt)
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
        from .fanout import make_fanout_ops  # noqa: PLC0415 - cycle: orchestration.fanout -> orchestration.ops
        ops.update(make_fanout_ops(spec, policy))
    return ops


def provenance(spec: Any, instance: Any, rt: Any, plan: Any, entry: Any) -> dict[str, Any]:
    """{'tags': input data versions of what batch N read, 'version': the sink's data version}
    (observations.py: the sink is "Unsynced" exactly while a source holds unread data)."""
    from .observations import provenance_tags, sink_data_version  # noqa: PLC0415 - cycle: orchestration.observations -> orchestration.assets -> orchestration.metadata -> orchestration.ops
    return {"tags": provenance_tags(spec, rt, dict(plan.entry.end), instance),
            "version": sink_data_version(rt, entry.sink_version)}


def own_evaluations(context: Any, events: list[Any]) -> list[Any]:
    """The events the commit op logs itself: all of them, less the evaluations of checks this run
    executes as their own steps (a Materialize from the UI selects the sink's checks; they run
    right after commit, on this batch), so each check is evaluated once per batch."""
    selected = set(getattr(context.dagster_run, "asset_check_selection", None) or ())
    return [e for e in events if not (isinstance(e, dg.AssetCheckEvaluation) and
                                      dg.AssetCheckKey(e.asset_key, e.check_name) in selected)]


def _plan(spec: Any, context: Any, wanted: int | None, drain_id: str | None) -> tuple[Any, Any, Any]:
    """(runtime, plan | None (idle) | refusal text, drain)."""
    from increments.execution import steps  # noqa: PLC0415 - increments.execution.steps (duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path
    rt = _rt(spec, context)
    reason = runner.refusal(rt, wanted, f"{spec.key}_batch")
    if reason:
        return rt, reason, None
    drain = _active_drain(spec, rt, drain_id)
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
                 progress: dict) -> tuple[dict[str, Any], list[Any], tuple[int, str] | None]:
    """Of committed batch N: (the materialization's metadata, the check evaluations to log after
    it, (N + 1, drain id) when its drain goes on)."""
    from increments.checkpoint.drains import DrainLog  # noqa: PLC0415 - increments.checkpoint.drains (sqlalchemy): kept off the code location's import path
    from .metadata import materialization_metadata  # noqa: PLC0415 - cycle: orchestration.metadata -> orchestration.ops
    rec = runner.lineage(rt, plan, entry, progress)
    md = materialization_metadata(rt, rec, progress, context.run_id, context.instance)
    events: list[Any] = []
    for rule, (passed, meta, desc) in health.evaluate(rt, plan.batch_id).items():
        events.append(dg.AssetCheckEvaluation(
            asset_key=spec.sink_key, check_name=spec.check_name(rule), passed=passed, metadata=meta,
            description=desc, severity=dg.AssetCheckSeverity.WARN))
    from .freshness import commit_evaluation  # noqa: PLC0415 - cycle: orchestration.freshness -> orchestration.assets -> orchestration.metadata -> orchestration.ops
    events.append(commit_evaluation(spec, rt))
    events.extend(evaluations(spec, progress, plan.batch_id))     # one check per expectation
    events.append(dg.AssetCheckEvaluation(
        asset_key=spec.sink_key, check_name=spec.check_name(ERRORS_CHECK), passed=True,
        severity=dg.AssetCheckSeverity.ERROR, description=f"batch {plan.batch_id} committed",
        metadata={"batch_id": str(plan.batch_id), "dagster_run": dg.MetadataValue.dagster_run(context.run_id)}))
    drain_id = batch.get("drain_id")
    if not drain_id:
        return md, events, None
    drains = DrainLog.for_runtime(rt)
    drain = drains.get(drain_id)
    if drain is None or not drain.active:
        return md, events, None
    if runner.drain_has_more(rt, drain):
        from .chain import drain_cancelled  # noqa: PLC0415 - cycle: orchestration.chain -> orchestration.ops
        if not drain_cancelled(context):
            return md, events, (plan.batch_id + 1, drain_id)
        drains.finish(drain_id, "cancelled")           # its backfill was cancelled: stop after this batch
        context.log.info(f"{rt.where()}: AvailableNow drain {drain_id} cancelled; stopped after batch {plan.batch_id}")
        events.append(drain_observation(spec, drain_id, "cancelled", drain.batches))
        return md, events, None
    drains.finish(drain_id)
    context.log.info(f"{rt.where()}: AvailableNow drain {drain_id} reached its target; done")
    events.append(drain_observation(spec, drain_id, "done", drain.batches))   # plan counted this batch
    return md, events, None


def drain_observation(spec: Any, drain_id: str, state: str, batches: int) -> dg.AssetObservation:
    return dg.AssetObservation(asset_key=spec.sink_key, metadata={"drain_id": drain_id, "drain_state": state,
                                                                  "drain_batches": batches})


def _step_metadata(info: Any) -> dict[str, Any]:
    """The op's output metadata from its step's result (ReadResult, ProcessResult or WriteResult)."""
    from increments.execution.step_results import ProcessResult, ReadResult  # noqa: PLC0415 - increments.execution.step_results (numpy, pyarrow): kept off the code location's import path
    if isinstance(info, ReadResult):
        return {"num_input_rows": info.num_input_rows, "duration_ms": info.get_batch_ms}
    if isinstance(info, ProcessResult):
        return {"state_versions": dg.MetadataValue.json(info.state_versions), "duration_ms": info.process_ms}
    return {"num_output_rows": info.num_output_rows, "duration_ms": info.add_batch_ms,
            "sink_version": "-" if info.sink_version is None else str(info.sink_version),
            "skipped_replay": info.skipped_replay}


def lineage_metadata(rec: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The batch's own entries of the sink materialization (orchestration/metadata.py)."""
    from .metadata import batch_metadata  # noqa: PLC0415 - cycle: orchestration.metadata -> orchestration.ops
    return batch_metadata(rec, run_id)

"""The batch job's ops: plan -> read -> process -> write -> commit, thin calls into
increments.execution.steps. Data between ops is staged on disk in the checkpoint (DiskStaging), so
each op could run in its own process; each op re-loads batch N's plan from the log and refuses
unless this Dagster run owns offsets[N] (steps.load_plan). rt.run_id is the Dagster run id.

The plan op emits no output when there is nothing to do or the run is refused (see
orchestration/runner.py for the rule); the other ops are then skipped and the run succeeds with
tag increments/outcome = idle | refused. Heavy libraries are imported inside the ops only.
"""
from __future__ import annotations

import json
from typing import Any

import dagster as dg

QUERY_TAG = "increments/query"
BATCH_TAG = "increments/batch_id"
OFFSETS_TAG = "increments/offsets"
OUTCOME_TAG = "increments/outcome"
DRAIN_TAG = "increments/drain_id"
ATTEMPT_TAG = "increments/attempt"

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
    context.instance.add_run_tags(context.run_id, {k: str(v)[:250] for k, v in tags.items()})


def _active_drain(spec: Any, rt: Any, drain_id: str | None) -> Any:
    from increments.checkpoint.drains import DrainLog
    drains = DrainLog.for_runtime(rt)
    if drain_id:
        d = drains.get(drain_id)
        return d if d is not None and d.active else None
    return drains.active() if spec.trigger.kind == "available_now" else None


def make_ops(spec: Any) -> dict[str, dg.OpDefinition]:
    """The five ops of one query's batch job (op names are prefixed by the query key)."""
    k = spec.key

    @dg.op(name=f"{k}__plan", config_schema=PLAN_CONFIG, out=dg.Out(dict, is_required=False),
           description="Decide the batch from the log (redo or next); write offsets[N] first.")
    def plan_op(context):
        from increments.errors import ConcurrentRunError
        from increments.execution import steps
        from . import runner
        from increments.checkpoint.drains import DrainLog
        rt = _rt(spec, context)
        wanted = context.op_config.get("batch_id")
        reason = runner.refusal(rt, wanted)
        drain = None if reason else _active_drain(spec, rt, context.op_config.get("drain_id"))
        if drain is not None:
            runner.restore_drain(rt, drain)
        plan = None
        if reason is None:
            try:
                plan = steps.plan_batch(rt, limited=spec.trigger.kind != "once")
            except ConcurrentRunError as e:
                reason = str(e)
        if reason is not None:
            context.log.warning(f"refused: {reason}")
            _tag(context, {OUTCOME_TAG: "refused", **({BATCH_TAG: wanted} if wanted is not None else {})})
            runner.release_run(k, context.run_id)
            return
        if plan is None:
            msg = f"{rt.where()}: nothing to do (no new data, no time-based work)"
            if drain is not None:
                DrainLog.for_runtime(rt).finish(drain.drain_id)
                context.log_event(drain_observation(spec, drain.drain_id, "done", drain.batches))
                msg += f"; AvailableNow drain {drain.drain_id} is done"
            context.log.info(msg)
            _tag(context, {OUTCOME_TAG: "idle"})
            runner.release_run(k, context.run_id)
            return
        rt.staging.put_json(plan.batch_id, "plan", plan.durations_ms)
        tags = {BATCH_TAG: plan.batch_id, OFFSETS_TAG: runner.offsets_text(plan.entry),
                ATTEMPT_TAG: plan.entry.attempt}
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
        @dg.op(name=f"{k}__{name}", ins={"batch": dg.In(dict)}, out=dg.Out(dict), description=desc)
        def step_op(context, batch: dict):
            from increments.execution import steps
            rt = _rt(spec, context)
            plan = steps.load_plan(rt, batch["batch_id"])
            info = getattr(steps, fn_name)(rt, plan)
            return dg.Output(batch, metadata=_step_metadata(name, info))
        return step_op

    @dg.op(name=f"{k}__commit", ins={"batch": dg.In(dict)}, description="Write commits[N]; record lineage.")
    def commit_op(context, batch: dict):
        from increments.execution import steps
        from increments.checkpoint.drains import DrainLog
        from . import health, runner
        rt = _rt(spec, context)
        try:
            plan = steps.load_plan(rt, batch["batch_id"])
            entry, progress = steps.commit_batch(rt, plan)
            rec = runner.lineage(rt, plan, entry, progress)
            context.log_event(dg.AssetMaterialization(asset_key=spec.sink_key, description=rt.where(plan.batch_id),
                                                      metadata=lineage_metadata(rec, context.run_id)))
            for rule, (passed, meta, desc) in health.evaluate(rt, plan.batch_id).items():
                context.log_event(dg.AssetCheckEvaluation(
                    asset_key=spec.sink_key, check_name=rule, passed=passed, metadata=meta, description=desc,
                    severity=dg.AssetCheckSeverity.WARN))
            if batch.get("drain_id"):
                drain = DrainLog.for_runtime(rt).get(batch["drain_id"])
                if drain is not None and drain.active and not runner.drain_has_more(rt, drain):
                    DrainLog.for_runtime(rt).finish(drain.drain_id)
                    context.log.info(f"{rt.where()}: AvailableNow drain {drain.drain_id} reached its target; done")
                    context.log_event(drain_observation(spec, drain.drain_id, "done", drain.batches + 1))
            _tag(context, {OUTCOME_TAG: "committed"})
        finally:
            runner.release_run(k, context.run_id)

    return {"plan": plan_op,
            "read": _step("read", "read_batch", "Read (start, end] of every source; stage the rows."),
            "process": _step("process", "process_batch", "Operators over the rows; state N-1 -> N."),
            "write": _step("write", "write_batch", "sink.add_batch(N): idempotent per batch."),
            "commit": commit_op}


def drain_observation(spec: Any, drain_id: str, state: str, batches: int) -> dg.AssetObservation:
    return dg.AssetObservation(asset_key=spec.sink_key, metadata={"drain_id": drain_id, "drain_state": state,
                                                                  "drain_batches": batches})


def _step_metadata(name: str, info: dict[str, Any]) -> dict[str, Any]:
    if name == "read":
        return {"num_input_rows": sum(s.get("num_input_rows", 0) for s in info.get("sources", [])),
                "duration_ms": info.get("get_batch_ms", 0)}
    if name == "process":
        return {"state_versions": dg.MetadataValue.json(info.get("state_versions", {})),
                "duration_ms": info.get("process_ms", 0)}
    return {"num_output_rows": info.get("num_output_rows", 0), "duration_ms": info.get("add_batch_ms", 0),
            "sink_version": str(info.get("sink_version")), "skipped_replay": bool(info.get("skipped_replay"))}


def lineage_metadata(rec: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The sink materialization's metadata: numbers are plotted over batches in the UI."""
    md: dict[str, Any] = {
        "batch_id": rec["batch_id"], "attempt": rec["attempt"], "offsets": rec["offsets"],
        "sources": dg.MetadataValue.json(rec["sources"]),
        "num_input_rows": rec["num_input_rows"], "num_output_rows": rec["num_output_rows"],
        "watermark": dg.MetadataValue.timestamp(rec["watermark_ms"] / 1000),
        "next_watermark": dg.MetadataValue.timestamp(rec["next_watermark_ms"] / 1000),
        "state_versions": dg.MetadataValue.json(rec["state_versions"]),
        "state_rows_total": rec["state_rows_total"], "sink": rec["sink"],
        "sink_version": dg.MetadataValue.json({"version": rec["sink_version"]}) if not isinstance(
            rec["sink_version"], (int, type(None))) else (rec["sink_version"] if rec["sink_version"] is not None else -1),
        "durations_ms": dg.MetadataValue.json(rec["durations_ms"]),
        "batch_duration_ms": int(rec["durations_ms"].get("trigger_execution", 0)),
        "processed_rows_per_second": float(rec["processed_rows_per_second"]),
        "dagster_run_id": run_id, "query_id": rec["query_id"],
    }
    return md


def lineage_json(rec: dict[str, Any]) -> str:
    return json.dumps(rec, sort_keys=True, default=str)

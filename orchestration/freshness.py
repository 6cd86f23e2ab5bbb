"""Freshness of a query's sink, derived from its trigger: asset check `freshness` on the sink and
sensor `<q>_freshness`, so a stalled query shows as stale in the UI.

A sink is fresh when the query keeps up with its input, whatever the age of its last write: an
idle stream (no new data) is fresh. The rule per trigger (grace: option `freshness_grace`, default
"5 minutes"):

    processing_time P   max_lag = 3 x max(P, sensor interval) + grace
                        stale iff work is pending (new data, time-based work or a redo) and has
                        been for longer than max_lag, counted from the later of the last commit
                        and the first tick that saw it pending (the sensor keeps that in its
                        cursor; the on-demand check only has the last commit)
    available_now,      T = the latest tick of the drain schedule's cron at or before now
    cron C              stale iff work is pending and either no drain started at or after T
                        (less a clock-skew allowance of 60 s: a drain started earlier, e.g. by
                        hand just before the tick, is not that tick's drain) while now > T +
                        grace (the schedule or its sensor did not run), or the
                        active drain has committed nothing (nor started) for longer than grace
                        plus one batch's budget (3 x the sensor interval)
    once                no rule: the check passes, saying so

A cron tick before the query's checkpoint was created, or before the sensor's first evaluation
(the instance or its schedule did not exist yet), is not held against the query.

The commit op evaluates the check after every commit (commit_evaluation), so each materialization
has its evaluation (never "Not evaluated"). The sensor (default status as the query's trigger
sensor) evaluates every minute and reports an AssetCheckEvaluation when the result changes, when
a batch was committed since its last report, and at least every 10 minutes, so the check's history
shows when the query went stale and when it recovered; it also observes the query's source assets
(observations.py: backlog, data version) when those change. It asks sources side-effect free
(runner.pending_work, as the trigger sensor does).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import dagster as dg

from increments.durations import parse_duration_ms
from increments.redaction import redact

from . import runner
from .assets import trigger_text
from .dagster_internals import last_cron_tick
from .observations import fingerprint, observation_events

CHECK = "freshness"
DEFAULT_GRACE = "5 minutes"
SENSOR_INTERVAL_S = 60
REPORT_EVERY_MS = 10 * 60 * 1000
CLOCK_SKEW_MS = 60 * 1000      # a drain's created_at (the run's clock) may run this far behind the sensor's


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Rule:
    kind: str                  # "processing_time" | "available_now" | "none"
    max_lag_ms: int = 0        # processing_time
    cron: str = ""             # available_now
    grace_ms: int = 0
    batch_budget_ms: int = 0

    def describe(self) -> str:
        if self.kind == "processing_time":
            return f"pending work is processed within {self.max_lag_ms // 1000} s"
        if self.kind == "available_now":
            return (f"a drain starts within {self.grace_ms // 1000} s of each tick of {self.cron!r} and keeps "
                    "committing until done")
        return "no freshness rule for this trigger"


def rule_for(spec: Any, grace: str | None = None) -> Rule:
    g = parse_duration_ms(grace or DEFAULT_GRACE)
    t = spec.trigger
    tick_ms = max(int(getattr(spec, "sensor_interval_s", 5)) * 1000, 5000)
    if t.kind == "processing_time":
        return Rule("processing_time", max_lag_ms=3 * max(int(t.interval_ms), tick_ms) + g, grace_ms=g)
    if t.kind == "available_now":
        return Rule("available_now", cron=spec.cron_schedule, grace_ms=g, batch_budget_ms=3 * tick_ms)
    return Rule("none")


def _last_tick_ms(cron: str, now_ms: int) -> int:
    return int(last_cron_tick(cron, now_ms / 1000) * 1000)


def evaluate(rt: Any, rule: Rule, now_ms: int, pending_since_ms: int | None = None,
             watched_since_ms: int | None = None) -> tuple[bool, str, dict]:
    """(fresh?, description, metadata) of the query behind runtime `rt` at `now_ms`. A cron tick
    before the query's checkpoint was created, or before `watched_since_ms` (the sensor's first
    evaluation: the instance or schedule did not exist yet), is not held against the query."""
    if rule.kind == "none":
        return True, rule.describe(), {"pending": False}
    last = rt.log.latest_commit()
    last_ms = last.committed_at_ms if last is not None else rt.meta.created_at_ms
    meta: dict[str, Any] = {"last_commit_batch": str(last.batch_id) if last else None,
                            "last_commit_age_s": round((now_ms - last_ms) / 1000, 1) if last else None}
    meta["pending"] = runner.pending_work(rt)
    if not meta["pending"]:
        return True, f"caught up: no pending work after batch {last.batch_id if last else '-'}", meta
    if rule.kind == "processing_time":
        since = max(last_ms, pending_since_ms or 0)
        waited = now_ms - since
        meta.update(pending_for_s=round(waited / 1000, 1), max_lag_s=rule.max_lag_ms // 1000)
        if waited > rule.max_lag_ms:
            return False, (f"stale: work has been pending for {waited // 1000} s (> {rule.max_lag_ms // 1000} s "
                           f"allowed by the trigger); last commit: batch {last.batch_id if last else '-'}"), meta
        return True, f"work pending for {waited // 1000} s (<= {rule.max_lag_ms // 1000} s)", meta
    from increments.checkpoint.drains import DrainLog  # noqa: PLC0415 - increments.checkpoint.drains (sqlalchemy): kept off the code location's import path
    tick = _last_tick_ms(rule.cron, now_ms)
    recent = DrainLog.for_runtime(rt).recent(1)
    drain = recent[0] if recent else None
    meta.update(last_tick=dg.MetadataValue.timestamp(tick / 1000),
                drain_state=drain.state if drain else None)
    floor = max(int(rt.meta.created_at_ms or 0), int(watched_since_ms or 0))
    if tick < floor - CLOCK_SKEW_MS:
        meta["first_judged_tick_after"] = dg.MetadataValue.timestamp(floor / 1000)
    elif now_ms > tick + rule.grace_ms and (drain is None or drain.created_at < tick - CLOCK_SKEW_MS):
        return False, (f"stale: no AvailableNow drain started for the tick at {time.strftime('%Y-%m-%d %H:%M', time.gmtime(tick / 1000))} "
                       f"UTC of {rule.cron!r} (is the schedule running?) and work is pending"), meta
    if drain is not None and drain.active:
        progress_ms = max(drain.created_at, last_ms if last else 0)
        if now_ms - progress_ms > rule.grace_ms + rule.batch_budget_ms:
            return False, (f"stale: drain {drain.drain_id} is active but nothing committed for "
                           f"{(now_ms - progress_ms) // 1000} s"), meta
    if tick < floor - CLOCK_SKEW_MS and (drain is None or drain.created_at < tick - CLOCK_SKEW_MS):
        return True, (f"work pending; the latest tick of {rule.cron!r} came before this query (or the instance "
                      "watching it) existed, so the next tick's drain is awaited"), meta
    return True, "the drain of the latest tick is running or done", meta


def _check_name(spec: Any) -> str:
    return spec.check_name(CHECK)


def make_freshness(spec: Any, grace: str | None = None) -> tuple[dg.AssetChecksDefinition, dg.SensorDefinition]:
    """The `freshness` asset check on the sink and the sensor `<q>_freshness` that reports it."""
    rule = rule_for(spec, grace)

    @dg.asset_check(asset=spec.sink_key, name=_check_name(spec), blocking=False,
                    description=f"Freshness derived from the trigger ({trigger_text(spec.trigger)}): {rule.describe()}")
    def check(context) -> dg.AssetCheckResult:
        rt = runner.build_runtime(spec.writer_factory, spec.path, staging="memory")
        try:
            passed, text, meta = evaluate(rt, rule, _now_ms())
        finally:
            runner.close_quietly(rt)
        return dg.AssetCheckResult(passed=passed, description=text, metadata=meta, severity=dg.AssetCheckSeverity.WARN)

    status = dg.DefaultSensorStatus.RUNNING if spec.sensor_status == "running" else dg.DefaultSensorStatus.STOPPED

    observed = [k for k in spec.source_keys() if k not in getattr(spec, "written_sources", set())]

    @dg.sensor(name=f"{spec.key}_freshness", minimum_interval_seconds=SENSOR_INTERVAL_S, default_status=status,
               description=f"Reports the freshness check of {spec.name}'s sink ({rule.describe()}) and observes "
                           "its sources (backlog, data version)",
               asset_selection=observed or None)    # the source assets list it under Automations
    def sensor(context):
        return freshness_tick(spec, rule, context.cursor, written_keys(context))

    return check, sensor


def commit_evaluation(spec: Any, rt: Any, grace: str | None = None) -> dg.AssetCheckEvaluation:
    """The freshness check evaluated right after a commit (logged by the commit op), so the check
    is evaluated for every materialization, never "Not evaluated" until the sensor's next report."""
    rule = rule_for(spec, grace if grace is not None else spec.freshness_grace)
    try:
        passed, text, meta = evaluate(rt, rule, _now_ms())
    except Exception as e:  # noqa: BLE001 - the batch is committed; the sensor reports the check
        passed, text, meta = True, redact(f"not evaluated after the commit ({type(e).__name__}: {e}); the sensor "
                                          "reports it"), {}
    return dg.AssetCheckEvaluation(asset_key=spec.sink_key, check_name=_check_name(spec), passed=passed,
                                   metadata=meta, severity=dg.AssetCheckSeverity.WARN, description=text)


def written_keys(context: Any) -> set:
    """The asset keys some query of the code location writes (their AssetSpec names `written_by`)."""
    try:
        g = context.repository_def.asset_graph
        return {k for k in g.get_all_asset_keys() if (g.get(k).metadata or {}).get("written_by")}
    except Exception:  # noqa: BLE001
        return set()


def freshness_tick(spec: Any, rule: Rule, cursor: str | None, written: set | None = None) -> dg.SensorResult:
    """One evaluation: the AssetCheckEvaluation when the result changed (or is old), the sources'
    observations when they changed (or are old: observations.py), the new cursor."""
    state = json.loads(cursor) if cursor else {}
    now = _now_ms()
    try:
        rt = runner.build_runtime(spec.writer_factory, spec.path, staging="memory")
    except Exception as e:  # noqa: BLE001 - e.g. the upstream table does not exist yet
        return dg.SensorResult(skip_reason=redact(f"query {spec.name} cannot be built: {type(e).__name__}: {e}"))
    try:
        pending_since = state.get("pending_since")
        state.setdefault("watching_since", now)
        passed, text, meta = evaluate(rt, rule, now, pending_since, state["watching_since"])
        state["pending_since"] = (pending_since or now) if meta.get("pending") else None
        try:
            observed = observation_events(spec, rt, written)
        except Exception:  # noqa: BLE001 - observations are advisory
            observed = []
    finally:
        runner.close_quietly(rt)
    events: list[Any] = []
    fp = fingerprint(observed)
    if observed and (state.get("observed") != fp or now - state.get("observed_at", 0) >= REPORT_EVERY_MS):
        events.extend(observed)
        state.update(observed=fp, observed_at=now)
    last_batch = meta.get("last_commit_batch")
    if state.get("passed") is not passed or now - state.get("reported_at", 0) >= REPORT_EVERY_MS or \
            state.get("reported_batch", last_batch) != last_batch:      # a new materialization: evaluate it
        state["reported_batch"] = last_batch
        events.append(dg.AssetCheckEvaluation(asset_key=spec.sink_key, check_name=_check_name(spec), passed=passed,
                                              metadata=meta, severity=dg.AssetCheckSeverity.WARN, description=text))
        state.update(passed=passed, reported_at=now)
    return dg.SensorResult(asset_events=events, cursor=json.dumps(state),
                           skip_reason=_tick_text(spec, text, events))


def _tick_text(spec: Any, text: str, events: list[Any]) -> str:
    """The tick's line in the sensor's history: the freshness result and what was reported."""
    checked = any(isinstance(e, dg.AssetCheckEvaluation) for e in events)
    observed = sum(isinstance(e, dg.AssetObservation) for e in events)
    done = ", ".join(x for x in ("check reported" if checked else "",
                                 f"{observed} source observation(s)" if observed else "") if x)
    return f"{spec.name}: {text} ({done or 'unchanged'})"

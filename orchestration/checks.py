"""Asset checks on a query's sink: the health rules of orchestration/health.py.

The commit op records every rule per batch (AssetCheckEvaluation); these definitions make the
rules visible on the asset page and re-evaluable from the UI against the latest committed batch.
"""
from __future__ import annotations

from typing import Any

import dagster as dg

from increments.plan.nodes import SourceNode, WithWatermark

from . import health, runner
from .health import RULES, applicable_rules
from .ops import ERRORS_CHECK, location_metadata
from .sensors import halt_state, halt_text

DESCRIPTIONS = {
    "processed_rate": "processed rows/s >= input rows/s (the query keeps up)",
    "batch_duration": "batch duration < processing-time trigger interval",
    "state_rows": "total state rows <= option max_state_rows (metadata: rows and memory_used_bytes per operator)",
    "kafka_lag": "Kafka records behind the batch's end offsets <= option max_kafka_lag",
    "watermark_lag": "batch timestamp - event-time watermark <= option max_watermark_lag (a duration string)",
}
ERRORS_DESCRIPTION = ("the query's batches commit: fails with the error (file and line when the engine names "
                      "them) of a batch that still failed after its retries, while the query is halted")


def make_checks(spec: Any) -> list[dg.AssetChecksDefinition]:
    """A check per health rule that applies to the query (health.applicable_rules: no kafka_lag
    without a Kafka source, no watermark_lag without a watermark), and batch_errors."""
    rules = spec_rules(spec)
    return [_check(spec, rule, desc) for rule, desc in DESCRIPTIONS.items() if rule in rules] + [_errors_check(spec)]


def spec_rules(spec: Any) -> tuple[str, ...]:
    """health.applicable_rules of a registered query, from its plan's nodes (no compile: the
    tables it reads may not exist yet): a Kafka source node, a with_watermark node."""
    try:
        nodes = list(spec.writer_factory().frame.node.walk())
    except Exception:  # noqa: BLE001 - the batch run reports the error itself; keep every rule
        return RULES
    has_kafka = any(isinstance(n, SourceNode) and "kafka" in type(n.source).__name__.lower() for n in nodes)
    return applicable_rules(has_kafka, any(isinstance(n, WithWatermark) for n in nodes))


def _errors_check(spec: Any) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=spec.sink_key, name=spec.check_name(ERRORS_CHECK), description=ERRORS_DESCRIPTION,
                    blocking=True)  # a halted query's sink must not feed downstream assets in the same run
    def check(context) -> dg.AssetCheckResult:
        h = halt_state(context.instance, spec)
        if h is None:
            return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.ERROR,
                                       description=f"query {spec.name} is not halted")
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR, description=halt_text(h),
                                   metadata={**({"batch_id": str(int(h["batch_id"]))} if h.get("batch_id") else {}),
                                             "error": dg.MetadataValue.text(h["error"]),
                                             **location_metadata(h["error"]),
                                             "dagster_run": dg.MetadataValue.dagster_run(h["run_id"])})
    return check


def _check(spec: Any, rule: str, desc: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=spec.sink_key, name=spec.check_name(rule), description=desc, blocking=False)
    def check() -> dg.AssetCheckResult:
        rt = runner.build_runtime(spec.writer_factory, spec.path, staging="memory")
        try:
            passed, meta, _ = health.evaluate(rt).get(rule, (True, {}, "does not apply to this query"))
        finally:
            runner.close_quietly(rt)
        return dg.AssetCheckResult(passed=passed, metadata=meta, severity=dg.AssetCheckSeverity.WARN)
    return check

"""Asset checks on a query's sink: the health rules of orchestration/health.py.

The commit op records every rule per batch (AssetCheckEvaluation); these definitions make the
rules visible on the asset page and re-evaluable from the UI against the latest committed batch.
"""
from __future__ import annotations

from typing import Any

import dagster as dg

DESCRIPTIONS = {
    "processed_rate": "processed rows/s >= input rows/s (the query keeps up)",
    "batch_duration": "batch duration < processing-time trigger interval",
    "state_rows": "total state rows <= option max_state_rows",
    "kafka_lag": "Kafka records behind the batch's end offsets <= option max_kafka_lag",
}


def make_checks(spec: Any) -> list[dg.AssetChecksDefinition]:
    out = []
    for rule, desc in DESCRIPTIONS.items():
        out.append(_check(spec, rule, desc))
    return out


def _check(spec: Any, rule: str, desc: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=spec.sink_key, name=rule, description=desc, blocking=False)
    def check() -> dg.AssetCheckResult:
        from . import health, runner
        rt = runner.build_runtime(spec.writer_factory, spec.path, staging="memory")
        try:
            passed, meta, _ = health.evaluate(rt)[rule]
        finally:
            runner.close_quietly(rt)
        return dg.AssetCheckResult(passed=passed, metadata=meta, severity=dg.AssetCheckSeverity.WARN)
    return check

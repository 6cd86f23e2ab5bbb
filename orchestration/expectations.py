"""One Dagster asset check per expectation of a query (frame.expect / expect_all), on its sink.

The check is named after the expectation (characters other than letters, digits and _ become _;
`expect_<name>` when that is the name of one of the query's other checks, such as freshness).
Per batch, from progress["expectations"] (operators/expectations.py):
    warn, drop  passed when no row failed; else a failed check of severity WARN (a warning: the
                batch committed, the failing rows were kept (warn) or removed (drop))
    fail        blocking, severity ERROR: passed on every committed batch (no row failed); a batch
                with failing rows does not commit and the query halts: the run's last attempt
                records the check failed with the error's counts and sample rows
Metadata: batch_id, passed_rows, failed_rows, failed_fraction, condition, on_violation (and for a
failed `fail`: sample_failing_rows, the error). Executing the check from the UI re-reads the
counts of the last committed batch from the batch log (commits[N].extra["expectations"]).
"""
from __future__ import annotations

import json
import re
from typing import Any

import dagster as dg

from increments.errors import ExpectationFailed
from increments.plan.nodes import Expect
from increments.redaction import redact

from . import runner

RESERVED = ("processed_rate", "batch_duration", "state_rows", "kafka_lag", "watermark_lag", "batch_errors",
            "freshness")


def declared(spec: Any) -> list[tuple[str, str, str]]:
    """(name, condition, on_violation) of every expectation in the query's plan nodes (no compile:
    the tables it reads may not exist yet), in declaration order."""
    try:
        nodes = list(spec.writer_factory().frame.node.walk())
    except Exception:  # noqa: BLE001 - the batch run reports the error itself
        return []
    out = [e for node in reversed(nodes) if isinstance(node, Expect) for e in node.expectations]
    seen: set[str] = set()
    return [e for e in out if not (e[0] in seen or seen.add(e[0]))]


def check_name(spec: Any, expectation: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", expectation) or "_"
    if base in RESERVED or base[0].isdigit():
        base = f"expect_{base}"
    return spec.check_name(base)


def _severity(on_violation: str) -> dg.AssetCheckSeverity:
    return dg.AssetCheckSeverity.ERROR if on_violation == "fail" else dg.AssetCheckSeverity.WARN


def _result(entry: dict[str, Any], batch_id: int) -> tuple[bool, str, dict[str, Any]]:
    passed, failed = int(entry.get("passed", 0)), int(entry.get("failed", 0))
    how = entry.get("on_violation", "warn")
    total = passed + failed
    md = {"batch_id": str(batch_id), "passed_rows": passed, "failed_rows": failed,
          "failed_fraction": float(failed / total) if total else 0.0,
          "condition": dg.MetadataValue.text(str(entry.get("condition", ""))), "on_violation": how}
    if failed == 0:
        desc = f"batch {batch_id}: all {passed} rows pass {entry.get('condition')}"
    else:
        did = "kept" if how == "warn" else "dropped" if how == "drop" else "failed the batch"
        desc = f"batch {batch_id}: {failed} of {total} rows fail {entry.get('condition')} ({did})"
    return failed == 0, desc, md


def evaluations(spec: Any, progress: dict[str, Any], batch_id: int) -> list[dg.AssetCheckEvaluation]:
    """The committed batch's check evaluations, one per expectation (module doc)."""
    out = []
    for e in progress.get("expectations") or []:
        ok, desc, md = _result(e, batch_id)
        out.append(dg.AssetCheckEvaluation(asset_key=spec.sink_key, check_name=check_name(spec, e["name"]),
                                           passed=ok, severity=_severity(e.get("on_violation", "warn")),
                                           description=desc, metadata=md))
    return out


def failure_evaluation(spec: Any, error: BaseException, batch_id: int | None) -> dg.AssetCheckEvaluation | None:
    """The failed blocking check of an `on_violation="fail"` expectation whose batch failed with
    ExpectationFailed (searched through the error's causes); None for any other error."""
    e: Any = error
    for _ in range(5):
        if e is None or isinstance(e, ExpectationFailed):
            break
        e = getattr(e, "cause", None) or e.__cause__
    if not isinstance(e, ExpectationFailed):
        return None
    ok, desc, md = _result({"passed": e.passed, "failed": e.failed, "condition": e.condition,
                            "on_violation": "fail"}, e.batch_id if e.batch_id is not None else batch_id)
    md["sample_failing_rows"] = dg.MetadataValue.json([_jsonable(r) for r in e.sample])
    md["error"] = dg.MetadataValue.text(redact(str(e))[:4000])
    return dg.AssetCheckEvaluation(asset_key=spec.sink_key, check_name=check_name(spec, e.expectation), passed=False,
                                   severity=dg.AssetCheckSeverity.ERROR,
                                   description=desc + f"; query {spec.name} is halted, nothing was committed",
                                   metadata=md)


def _jsonable(row: Any) -> Any:
    return json.loads(json.dumps(row, default=str))


def make_expectation_checks(spec: Any) -> list[dg.AssetChecksDefinition]:
    """One check definition per declared expectation (blocking for on_violation="fail")."""
    return [_check(spec, name, cond, how) for name, cond, how in declared(spec)]


def _check(spec: Any, name: str, cond: str, how: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=spec.sink_key, name=check_name(spec, name), blocking=how == "fail",
                    description=f"expectation {name!r}: {cond} (on_violation={how!r}): rows passing and "
                                "failing per batch")
    def check() -> dg.AssetCheckResult:
        rt = runner.build_runtime(spec.writer_factory, spec.path, staging="memory")
        try:
            commit = rt.log.latest_commit()
        finally:
            runner.close_quietly(rt)
        if commit is None:
            return dg.AssetCheckResult(passed=True, severity=_severity(how), description="no committed batch yet")
        entry = next((e for e in (commit.extra or {}).get("expectations") or [] if e.get("name") == name),
                     {"passed": 0, "failed": 0, "condition": cond, "on_violation": how})
        ok, desc, md = _result(entry, commit.batch_id)
        return dg.AssetCheckResult(passed=ok, severity=_severity(how), description=desc, metadata=md)
    return check

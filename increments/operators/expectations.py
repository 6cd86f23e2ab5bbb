"""Expectations: `frame.expect(name, condition, on_violation="warn" | "drop" | "fail", quarantine=None)`
and `frame.expect_all({name: condition, ...}, ...)`, anywhere in a query (stateless: every row of a
batch is judged in that batch).

One batch, per expectation of an expect / expect_all call, over the rows reaching it:
    passed = rows whose condition is TRUE; failed = rows where it is FALSE or NULL (so a NULL
    column fails `x > 0`: write `x IS NULL OR x > 0` to let NULL pass)
    warn: every row goes on (counted only)
    drop: the failing rows are removed; with quarantine=inc.dead_letter.delta(path) they are
          appended there once per batch (sinks/quarantine.py) and counted in progress dead_letters
    fail: any failing row fails the batch in the process step, before any state, sink or log
          commit: ExpectationFailed names the query, batch, expectation, condition, the counts and
          up to 5 failing rows; the query halts. A restart redoes the same batch (same rows): it
          fails again until the expectation (a stateless step, changeable) or the input changes.
The counts of every batch go to ctx.expectations, then progress["expectations"] (a list of
{name, condition, on_violation, passed, failed}) and commits[N].extra["expectations"].

Rules (AnalysisException while compiling): names are unique in a query (they name the progress
entry and the Dagster asset check); a condition is a boolean SQL expression over the input's
columns; quarantine needs on_violation="drop".
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import AnalysisException, ExpectationFailed
from ..plan import nodes as n
from ..sinks import quarantine as q
from ..sql import is_division_by_zero, run_sql, run_sql_ansi
from .base import BatchContext, PhysicalOp
from .join_outputs import qualify_sql
from .stateless import divide_by_zero_error

VIOLATIONS = ("warn", "drop", "fail")
SAMPLE_ROWS = 5


@dataclass(frozen=True)
class Expectation:
    name: str
    condition: str
    on_violation: str

    def report(self, passed: int, failed: int) -> dict[str, Any]:
        return {"name": self.name, "condition": self.condition, "on_violation": self.on_violation,
                "passed": int(passed), "failed": int(failed)}


class ExpectOp(PhysicalOp):
    """The rows of its input judged by one expect / expect_all call (module doc)."""

    def __init__(self, child: PhysicalOp, expectations: list[Expectation], quarantine: Any):
        super().__init__([child], child.schema)
        self.expectations = expectations
        self.quarantine = quarantine
        #: a side table written once per batch: execution/partitioned.py keeps such plans in one piece
        self.dead_letter = quarantine
        self.alias, self.qualifiers = child.alias, child.qualifiers
        self._flags_sql = ("SELECT " + ", ".join(f"coalesce(({e.condition}), false) AS __e{i}"
                                                 for i, e in enumerate(expectations)) + " FROM __in")

    def describe(self) -> str:
        return "Expect[" + ", ".join(f"{e.name}: {e.condition} ({e.on_violation})" for e in self.expectations) + "]"

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        if table.num_rows == 0:
            for e in self.expectations:
                ctx.expectations[e.name] = e.report(0, 0)
            return table
        try:        # a division by zero in a condition raises, as in Spark (sql.run_sql_ansi)
            flags = run_sql_ansi(self._flags_sql, {"__in": table})
        except Exception as err:  # duckdb: a conversion error in a condition
            if is_division_by_zero(err):
                raise divide_by_zero_error(ctx, self._dividing(table, err), err) from err
            raise RuntimeError(ctx.where(f"{self.describe()} failed: {err}")) from err
        oks = [np.asarray(flags.column(i).combine_chunks().to_numpy(zero_copy_only=False), dtype=bool)
               for i in range(len(self.expectations))]
        for e, ok in zip(self.expectations, oks):
            passed = int(ok.sum())
            ctx.expectations[e.name] = e.report(passed, table.num_rows - passed)
        for e, ok in zip(self.expectations, oks):
            if e.on_violation == "fail" and not ok.all():
                self._fail(ctx, e, table, ok)
        drops = [ok for e, ok in zip(self.expectations, oks) if e.on_violation == "drop"]
        if not drops:
            return table
        keep = np.logical_and.reduce(drops)
        if keep.all():
            return table
        if self.quarantine is not None:
            self._quarantine(ctx, table, oks, keep)
        return table.filter(pa.array(keep))

    def _dividing(self, table: pa.Table, err: Exception) -> str:
        """'expectation NAME (CONDITION)': the first one whose condition divides by zero (failure path)."""
        for e in self.expectations:
            try:
                run_sql_ansi(f"SELECT ({e.condition}) FROM __in", {"__in": table})
            except Exception as one:  # noqa: BLE001
                if is_division_by_zero(one):
                    return f"expectation {e.name!r} ({e.condition})"
        return self.describe()

    def _fail(self, ctx: BatchContext, e: Expectation, table: pa.Table, ok: np.ndarray) -> None:
        bad = table.filter(pa.array(~ok))
        sample = [_jsonable(r) for r in bad.slice(0, SAMPLE_ROWS).to_pylist()]
        rows = "; ".join(json.dumps(r, default=str)[:300] for r in sample)
        raise ExpectationFailed(
            ctx.where(f"expectation {e.name!r} ({e.condition}) failed for {bad.num_rows} of {table.num_rows} rows "
                      f"(on_violation='fail'); nothing of this batch was committed and the query stops. "
                      f"Failing rows (first {len(sample)}): {rows}. Fix the input, or declare the expectation with "
                      "on_violation='drop' (optionally with a quarantine table) or 'warn' and restart"),
            expectation=e.name, condition=e.condition, batch_id=ctx.batch_id, passed=int(ok.sum()),
            failed=bad.num_rows, sample=sample)

    def _quarantine(self, ctx: BatchContext, table: pa.Table, oks: list[np.ndarray], keep: np.ndarray) -> None:
        gone = np.flatnonzero(~keep)
        dropping = [i for i, e in enumerate(self.expectations) if e.on_violation == "drop"]
        first = [next(self.expectations[i].name for i in dropping if not oks[i][r]) for r in gone]
        failed = [[e.name for e, ok in zip(self.expectations, oks) if not ok[r]] for r in gone]
        n_rows = q.write(self.quarantine, ctx, self, table.take(pa.array(gone)), first, failed)
        key = self.quarantine.description
        ctx.dead_letters[key] = ctx.dead_letters.get(key, 0) + n_rows


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v)) for k, v in row.items()}


def expectation_ops(root: PhysicalOp) -> list[ExpectOp]:
    """The expectation operators of a plan, outermost first (declaration order is innermost first)."""
    return [op for op in root.walk() if isinstance(op, ExpectOp)]


def declared(root: PhysicalOp) -> list[Expectation]:
    """Every expectation of a plan in declaration order (the order of progress["expectations"])."""
    return [e for op in reversed(expectation_ops(root)) for e in op.expectations]


def build_expect(compiler: Any, node: n.Expect) -> PhysicalOp:
    child = compiler.build(node.child)
    quals = child.qualifiers
    if quals is None and child.alias:
        quals = {child.alias: {c: c for c in child.schema.names}}
    names = compiler.expectation_names
    out = []
    for name, condition, how in node.expectations:
        if how not in VIOLATIONS:
            raise AnalysisException(f"expect({name!r}): on_violation={how!r}; use 'warn', 'drop' or 'fail'")
        if name in names:
            raise AnalysisException(f"expect({name!r}): an expectation of that name is already declared in this "
                                    "query; names must be unique (they name the progress entry and the asset check)")
        names.add(name)
        cond = qualify_sql(condition, quals) if quals else condition
        try:
            t = run_sql(f"SELECT ({cond}) AS __e FROM __in", {"__in": child.schema.empty_table()}).schema.field(0).type
        except Exception as e:
            raise AnalysisException(f"expect({name!r}): condition {condition!r}: {e} "
                                    f"(input columns: {child.schema.names})") from e
        if not (pa.types.is_boolean(t) or pa.types.is_null(t)):
            raise AnalysisException(f"expect({name!r}): condition {condition!r} is {t}, not a boolean")
        out.append(Expectation(name, cond, how))
    if node.quarantine is not None and not any(e.on_violation == "drop" for e in out):
        raise AnalysisException(f"expect({out[0].name!r}): quarantine= takes the rows an expectation drops; "
                                "declare it with on_violation='drop'")
    op = ExpectOp(child, out, node.quarantine)
    op.operator_id = f"expect-{out[0].name}"      # stable: names the quarantine commits (app id)
    op.operator_name = "expect"
    return op


"""Stateless operators: scans, fused DuckDB SQL stages (select/filter/with_column) and the
watermark tracker (parse_json: parse_json.py). Every row of a batch flows through in that batch;
nothing is dropped by a declared watermark here (SEMANTICS.md: stateless queries track and report
it only).
"""
from __future__ import annotations

from typing import Any, Callable

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ArithmeticOverflowError, DivideByZeroError
from ..sql import duckdb_connection, is_division_by_zero, run_sql, run_sql_ansi
from .base import BatchContext, EventTimeStats, PhysicalOp

Stage = Callable[[str], str]  # relation SQL text -> SQL text


class ScanOp(PhysicalOp):
    """The rows a streaming source produced for this batch (staged by the read step)."""

    def __init__(self, source_index: int, schema: pa.Schema, description: str, source: Any = None):
        super().__init__([], schema)
        self.source_index = source_index
        self.description = description
        self.source = source   # the Source object (an operator right above may tell it what it reads)

    def execute(self, ctx: BatchContext) -> pa.Table:
        return ctx.inputs[self.source_index]

    def describe(self) -> str:
        return f"Scan {self.description}"


class StaticScanOp(PhysicalOp):
    """A static side of a stream-static join, re-read at every batch (a Delta table at its latest version)."""

    def __init__(self, loader: Any, schema: pa.Schema):
        super().__init__([], schema)
        self.loader = loader

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.loader.load()
        version = getattr(self.loader, "last_version", None)
        if version is not None:
            ctx.static_versions[self.loader.description] = version
        return table

    def describe(self) -> str:
        return f"StaticScan {self.loader.description}"


class SqlOp(PhysicalOp):
    """One DuckDB query over the child's Arrow table, fused from consecutive stateless stages."""

    def __init__(self, child: PhysicalOp, stages: list[Stage], schema: pa.Schema, labels: list[str]):
        super().__init__([child], schema)
        self.stages = stages
        self.labels = labels
        #: per stage, ("column", select expression) of each column it computes, or ("filter",
        #: condition), when the compiler knows them; names the column of an overflow (_overflow)
        self.stage_exprs: list[list[tuple[str, str]]] = []
        self._empty_answer: tuple[pa.Schema, pa.Table] | None = None   # (input schema, output) for no rows

    @property
    def sql(self) -> str:
        rel = "__in"
        for stage in self.stages:
            rel = f"({stage(rel)})"
        return rel[1:-1]

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        if table.num_rows == 0:
            # an empty input: DuckDB's answer for it once, then reused (registering a table and
            # planning the query cost ~1 ms, the whole budget of an empty batch). Only an answer with
            # no rows is reused: a query that makes rows out of none (an aggregate) runs every time.
            cached = self._empty_answer
            if cached is not None and cached[0].equals(table.schema):
                return cached[1]
        try:        # a division by zero raises, as in Spark (sql.run_sql_ansi)
            out = run_sql_ansi(self.sql, {"__in": table})
        except Exception as e:  # duckdb errors: conversion errors in expressions etc.
            if is_division_by_zero(e):
                raise self._divide_by_zero(ctx, table, e) from e
            if is_overflow(e):
                raise self._overflow(ctx, table, e) from e
            raise RuntimeError(ctx.where(f"{' -> '.join(self.labels)} failed: {e}")) from e
        if table.num_rows == 0 and out.num_rows == 0:
            self._empty_answer = (table.schema, out)
        return out

    def describe(self) -> str:
        return " -> ".join(self.labels)

    def _locate(self, table: pa.Table, e: Exception, matches, con=None) -> tuple[str, str, Exception]:
        """(stage, ", column 'c' (expr)" or ", in the filter condition ...", its error) of the error
        `e` of this batch that `matches` (is_overflow, is_division_by_zero): found by running the
        stages one at a time, then that stage's expressions one at a time (only on a failure path)."""
        where, rel = " -> ".join(self.labels), table
        column = ""
        for k, stage in enumerate(self.stages):
            try:
                rel = run_sql(stage("__in"), {"__in": rel}, con)
                continue
            except Exception as err:  # noqa: BLE001 - the stage that fails
                if not matches(err):
                    break
                where, e = self.labels[k], err
            exprs = self.stage_exprs[k] if k < len(self.stage_exprs) else []
            for kind, expr in exprs:
                try:
                    run_sql(f"SELECT {expr} FROM __in", {"__in": rel}, con)
                except Exception as err:  # noqa: BLE001
                    if not matches(err):
                        continue
                    if kind == "filter":
                        column = f", in the filter condition {expr}"
                    else:
                        name = run_sql(f"SELECT {expr} FROM __in LIMIT 0", {"__in": rel.slice(0, 0)}).schema.names[0]
                        column = f", column {name!r} ({expr})"
                    break
            break
        return where, column, e

    def _overflow(self, ctx: BatchContext, table: pa.Table, e: Exception) -> ArithmeticOverflowError:
        """The integer overflow `e` of this batch, naming the stage and the column (or filter)."""
        where, column, e = self._locate(table, e, is_overflow)
        return ArithmeticOverflowError(ctx.where(
            f"{where}{column}: integer overflow: {str(e).splitlines()[0]} (Spark 4 raises ARITHMETIC_OVERFLOW here, "
            f"in ANSI mode, its default; the value does not wrap around). Compute it in a wider type (CAST(... AS "
            f"DOUBLE) or DECIMAL(38, 0)), or keep the values smaller; the batch is not committed."))

    def _divide_by_zero(self, ctx: BatchContext, table: pa.Table, e: Exception) -> DivideByZeroError:
        """The division (or remainder) by zero `e` of this batch, naming the stage and the column."""
        where, column, e = self._locate(table, e, is_division_by_zero, duckdb_connection(strict=True))
        return divide_by_zero_error(ctx, f"{where}{column}", e)


def divide_by_zero_error(ctx: BatchContext, where: str, e: Exception) -> DivideByZeroError:
    """DivideByZeroError for DuckDB's division-by-zero error `e` at `where` (stage and column, an
    expectation), with Spark 4's error class and the try_ function to use instead."""
    first = str(e).splitlines()[0]
    expr = first.split("Division by zero in expression", 1)[-1].split(". Use TRY", 1)[0].strip()
    mod = "%" in expr or "fmod" in expr or "mod(" in expr
    cls, fn = ("REMAINDER_BY_ZERO", "try_mod") if mod else ("DIVIDE_BY_ZERO", "try_divide")
    what = "remainder" if mod else "division"
    return DivideByZeroError(ctx.where(
        f"{where}: {what} by zero{(' in ' + expr) if expr else ''} (Spark 4 raises {cls} here, in ANSI mode, its "
        f"default; the result is not Infinity, NaN or NULL). Use {fn}(a, b) to get NULL for a zero divisor, or "
        "filter those rows out first; the batch is not committed."))


def is_overflow(e: BaseException) -> bool:
    """A DuckDB error of an integer result beyond its type: `x + 1` at BIGINT's limit (Out of Range
    Error) or a cast of a number out of the target's range (Conversion Error ... out of range)."""
    if isinstance(e, duckdb.OutOfRangeException):
        return True
    return isinstance(e, duckdb.ConversionException) and "out of range" in str(e) and "string" not in str(e).lower()


class WatermarkOp(PhysicalOp):
    """with_watermark(column, delay): records the batch's event-time stats for the next watermark.

    Rows pass through unchanged; late-row filtering is the stateful operators' job (they see
    ctx.late_watermark_ms). Null event times cannot advance the watermark and are counted.
    """

    def __init__(self, child: PhysicalOp, column: str, delay_ms: int, watermark_id: str):
        super().__init__([child], child.schema)
        self.column, self.delay_ms, self.watermark_id = column, delay_ms, watermark_id
        self.late_rows: Any = None    # with_watermark(..., late_rows=target): see sinks/late_rows.py
        self.event_time_cols = {column: (watermark_id, delay_ms)}

    def columns_read(self, needed: set[str] | None) -> set[str] | None:
        """What the output needs, plus the event-time column."""
        return None if needed is None else needed | {self.column}

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        stats = ctx.event_time.setdefault(self.watermark_id, EventTimeStats())
        col = table.column(self.column)
        if table.num_rows:
            stats.add(*_event_time_stats(col))
            nulls = col.null_count
            if nulls:
                ctx.warnings.append(f"{nulls} rows with a null {self.column!r} (they cannot advance the watermark)")
        return table

    def describe(self) -> str:
        return f"EventTimeWatermark({self.column}, {self.delay_ms} ms)"


def _event_time_stats(col) -> tuple[int | None, int | None, int, int]:
    """(min, max, sum, count) of the event times in ms, nulls skipped: a timestamp (microseconds)
    becomes ms by integer division truncated toward zero, each value before the sum (the sum of
    microseconds could overflow int64). Without nulls and with no time before 1970 (min >= 0, where
    truncating and flooring agree), one min_max pass over the raw values and numpy's floor
    division of each chunk replace Arrow's divide over the column (about half the time);
    otherwise Arrow's divide, as Spark's ``micros / 1000``."""
    if pa.types.is_timestamp(col.type):
        raw = col.cast(pa.int64())
        count = len(raw) - raw.null_count
        if not count:
            return None, None, 0, 0
        if not raw.null_count:
            mm = pc.min_max(raw)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if lo >= 0:
                total = sum(int((c.to_numpy() // 1000).sum()) for c in raw.chunks if len(c))
                return lo // 1000, hi // 1000, total, count
        ms = pc.divide(raw, 1000)
    else:
        ms = col
        count = len(ms) - ms.null_count
        if not count:
            return None, None, 0, 0
    mm = pc.min_max(ms)
    return mm["min"].as_py(), mm["max"].as_py(), pc.sum(ms).as_py(), count

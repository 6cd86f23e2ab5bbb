"""Stateless operators: scans, fused DuckDB SQL stages (select/filter/with_column), parse_json and
the watermark tracker. Every row of a batch flows through in that batch; nothing is dropped by a
declared watermark here (SEMANTICS.md: stateless queries track and report it only).
"""
from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from ..errors import ArithmeticOverflowError, DivideByZeroError, MalformedInputError
from ..sources.file_formats import first_bad_json_row, has_wrong_json_types
from ..sql import duckdb_connection, is_division_by_zero, quote_ident, run_sql, run_sql_ansi
from ..nested_json import json_to_sql
from ..types import Schema, is_nested
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
    import duckdb
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


def _binary_as_text(con, values: pa.Array) -> pa.Array:
    """Binary values as UTF-8 text (zero-copy when valid). A value that is not valid UTF-8 becomes
    a text that is not JSON ("\\x00invalid UTF-8: ..."), so parse_json reports or dead-letters it."""
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        sql = ("SELECT CASE WHEN v IS NOT NULL AND try(decode(v)) IS NULL THEN chr(0) || 'invalid UTF-8: ' || "
               "decode(v, 'replace') ELSE decode(v) END AS v FROM __bin")
        return run_sql(sql, {"__bin": pa.table({"v": values.cast(pa.binary())})}, con).column("v").combine_chunks()


def _one_object_per_value(texts) -> bool:
    """Is every value non-null, starting with '{' and ending with '}' (nothing around them)?

    Then, in the values joined by newlines, no JSON value can span two of them: a string cannot
    hold the raw newline (the parser rejects control characters in strings), and between tokens a
    '}' that ends a value followed by the '{' that starts the next value is valid only at the top
    level. So every value yields at least one parsed row, and n rows for n values means exactly one
    each, in order. (Without it, a blank value beside a value holding two objects adds up too.)"""
    n = len(texts)
    large = pa.types.is_large_string(texts.type)
    if not (large or pa.types.is_string(texts.type)) or n == 0 or texts.null_count or texts.buffers()[2] is None:
        return False
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64 if large else np.int32, count=n + 1,
                            offset=texts.offset * (8 if large else 4))
    data = np.frombuffer(texts.buffers()[2], dtype=np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    return (bool(((ends - starts) >= 2).all()) and bool((data[starts] == 0x7B).all())
            and bool((data[ends - 1] == 0x7D).all()))


class ParseJsonOp(PhysicalOp):
    """parse_json: json_transform in DuckDB over the whole column; bad rows fail the batch (or go to
    the dead-letter table), named by topic/partition/offset when the input carries them."""

    def __init__(self, child: PhysicalOp, schema: Schema, column: str, keep: tuple[str, ...], dead_letter: Any,
                 out_schema: pa.Schema):
        super().__init__([child], out_schema)
        self.json_schema, self.column, self.keep, self.dead_letter = schema, column, keep, dead_letter
        self._arrow_json = schema.to_arrow()
        # right on a Kafka scan's value column: the source parses the values while it consumes the
        # next ones (sources/kafka.py, take_parsed); checked here like the fast path's own parse
        self._kafka = None
        # pyarrow's JSON reader converts nested values by its own rules (and reads no MAP): nested
        # schemas take the DuckDB path only (nested_json.py: Spark's rules)
        self._nested = any(is_nested(f.duckdb_type) for f in schema.fields)
        if (column == "value" and not self._nested and isinstance(child, ScanOp)
                and hasattr(child.source, "parse_values_as")):
            self._kafka = child.source
            self._kafka.parse_values_as(self._arrow_json)

    def columns_read(self, needed: set[str] | None) -> set[str]:
        """The text column, the kept ones, what names a bad row (topic, partition, offset) and,
        with a dead-letter target, what it records (timestamp)."""
        cols = {self.column, *self.keep, "topic", "partition", "offset"}
        return cols | ({"timestamp"} if self.dead_letter is not None else set())

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        pre = self._kafka.take_parsed(table, self._arrow_json) if self._kafka is not None else None
        if pre is not None:
            fast = self._parsed_while_reading(table, pre)
            if fast is not None:
                return fast
        con = duckdb_connection()
        texts = table.column(self.column)
        texts = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
        if pa.types.is_binary(texts.type) or pa.types.is_large_binary(texts.type):
            texts = _binary_as_text(con, texts)
        fast = self._arrow_fast_path(table, texts) if pre is None and not self._nested else None   # pre failed: so would this
        if fast is not None:
            return fast
        if table.num_rows == 0 or self._all_objects(con, texts):  # fast path: one validity pass + the transform
            parsed = self._transform(con, table, texts)
            if table.num_rows == 0 or not (self._type_errors(con, texts, parsed)
                                           or has_wrong_json_types(con, texts, self.json_schema)):
                return parsed
        bad = first_bad_json_row(con, texts, self.json_schema) if table.num_rows else None
        if bad is not None:
            if self.dead_letter is None:
                raise MalformedInputError(ctx.where(
                    f"parse_json({self.column!r}): {self._locate(table, bad[0])}: {bad[1]}. Fix the producer, or "
                    "route bad rows with parse_json(..., dead_letter=inc.dead_letter.delta(path)); nothing of this batch "
                    "was processed."))
            table = self._route_dead_letters(ctx, con, table, texts)
            texts = table.column(self.column).combine_chunks()
            if pa.types.is_binary(texts.type) or pa.types.is_large_binary(texts.type):
                texts = _binary_as_text(con, texts)
        parsed = self._transform(con, table, texts)
        return parsed

    def _parsed_while_reading(self, table: pa.Table, pre: list) -> pa.Table | None:
        """The Kafka source's parse of this very table, done piece by piece while it was read (a list
        of (values, parsed piece or None)), when it provably holds exactly one row per value: every
        piece parsed into as many rows as it had values, and every value is valid UTF-8 and one
        object (_one_object_per_value). Else None: the exact path decides."""
        column = table.column(self.column)
        chunks = [c for c in (column.chunks if isinstance(column, pa.ChunkedArray) else [column]) if len(c)]
        n = sum(len(c) for c in chunks)
        if not n or sum(k for k, _ in pre) != n or any(t is None or t.num_rows != k for k, t in pre):
            return None
        try:   # per chunk: no copy of the whole column; invalid UTF-8 raises (pyarrow's parser does not check)
            texts = [c.cast(pa.string()) if pa.types.is_binary(c.type) else c for c in chunks]
        except pa.ArrowInvalid:
            return None
        if not all(_one_object_per_value(t) for t in texts):
            return None
        return self._with_kept(table, pa.concat_tables([t for _, t in pre]))

    def _arrow_fast_path(self, table: pa.Table, texts) -> pa.Table | None:
        """Parse the whole column as one JSON-lines buffer with pyarrow's multithreaded reader.

        Only taken when it provably parsed every value into exactly one row (_one_object_per_value
        and the row count); anything unusual (a null or blank value, a value spanning lines, a
        wrong type, invalid JSON) returns None and the DuckDB path, which can name the bad row,
        decides."""
        n = len(texts)
        if not _one_object_per_value(texts):
            return None
        if int(pc.sum(pc.binary_length(texts)).as_py() or 0) + n >= (1 << 31) - 1:
            texts = texts.cast(pa.large_string())
        buf = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), texts), "\n")[0].as_buffer()
        try:
            opts = pajson.ParseOptions(explicit_schema=self._arrow_json, unexpected_field_behavior="ignore")
            parsed = pajson.read_json(pa.BufferReader(buf), parse_options=opts,
                                      read_options=pajson.ReadOptions(block_size=max(1 << 20, min(buf.size + 1, 64 << 20))))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
        if parsed.num_rows != n:
            return None
        return self._with_kept(table, parsed)

    def _with_kept(self, table: pa.Table, parsed: pa.Table) -> pa.Table:
        cols = {f.name: parsed.column(f.name) for f in self.json_schema.fields}
        cols.update({k: table.column(k) for k in self.keep})
        return pa.table(cols).cast(self.schema)

    def _transform(self, con, table: pa.Table, texts) -> pa.Table:
        keep = {k: table.column(k) for k in self.keep}
        t = pa.table({"__v": texts, **keep})
        def col(f) -> str:
            if is_nested(f.duckdb_type):   # read as JSON, converted by Spark's rules (nested_json.py)
                return f"{json_to_sql('__s.' + quote_ident(f.name), f.duckdb_type)} AS {quote_ident(f.name)}"
            return f"__s.{quote_ident(f.name)} AS {quote_ident(f.name)}"
        cols = ", ".join(col(f) for f in self.json_schema.fields)
        structure = json.dumps({f.name: "JSON" if is_nested(f.duckdb_type) else f.duckdb_type
                                for f in self.json_schema.fields})
        kept = "".join(f", {quote_ident(k)}" for k in self.keep)
        sql = (f"SELECT {cols}{kept} FROM (SELECT json_transform(CASE WHEN trim(__v) = '' THEN NULL ELSE __v END, "
               f"'{structure.replace(chr(39), chr(39) * 2)}') AS __s{kept} "
               f"FROM __pj)")
        out = run_sql(sql, {"__pj": t}, con)
        return out.cast(self.schema)

    @staticmethod
    def _all_objects(con, texts) -> bool:
        """True when every non-blank value is a valid JSON object (one pass over the column)."""
        sql = ("SELECT count(*) FROM __ao WHERE v IS NOT NULL AND trim(v) <> '' AND "
               "CASE WHEN json_valid(v) THEN json_type(v) <> 'OBJECT' ELSE true END")
        return run_sql(sql, {"__ao": pa.table({"v": texts})}, con).column(0)[0].as_py() == 0

    def _type_errors(self, con, texts, parsed: pa.Table) -> bool:
        """Did any field come out NULL where the JSON holds a non-null value (a wrongly typed field)?
        Only fields with NULLs are checked, and only on those rows."""
        for f in self.json_schema.fields:
            col = parsed.column(f.name)
            if col.null_count == 0 or is_nested(f.duckdb_type):   # nested: NULL when it does not convert
                continue
            rows = texts.filter(pc.is_null(col).combine_chunks() if isinstance(col, pa.ChunkedArray) else pc.is_null(col))
            path = "$." + f.name if f.name.isidentifier() else "$." + json.dumps(f.name)
            sql = ("SELECT count(*) FROM __te WHERE v IS NOT NULL AND trim(v) <> '' "
                   f"AND coalesce(json_type(v, '{path.replace(chr(39), chr(39) * 2)}'), 'NULL') <> 'NULL'")
            if run_sql(sql, {"__te": pa.table({"v": rows})}, con).column(0)[0].as_py():
                return True
        return False

    def _locate(self, table: pa.Table, row: int) -> str:
        names = table.column_names
        if {"topic", "partition", "offset"} <= set(names):
            return (f"topic {table.column('topic')[row].as_py()}, partition {table.column('partition')[row].as_py()}, "
                    f"offset {table.column('offset')[row].as_py()}")
        return f"row {row} of the batch"

    def _route_dead_letters(self, ctx: BatchContext, con, table: pa.Table, texts) -> pa.Table:
        """Split off every bad row, hand them to the dead-letter target, return the good ones."""
        reasons = []
        # one diagnosis query per bad row (bad rows are rare); each pass removes the row it found
        ok = np.ones(table.num_rows, dtype=bool)
        remaining = texts
        idx = np.arange(table.num_rows)
        while True:
            bad = first_bad_json_row(con, remaining, self.json_schema)
            if bad is None:
                break
            ok[idx[bad[0]]] = False
            reasons.append((int(idx[bad[0]]), bad[1]))
            keep_mask = np.ones(len(remaining), dtype=bool)
            keep_mask[bad[0]] = False  # only this row: first_bad_json_row checks JSON validity before types
            remaining = remaining.filter(pa.array(keep_mask))
            idx = idx[keep_mask]
        bad_rows = table.filter(pa.array(~ok))
        reason_col = pa.array([r for _, r in sorted(reasons)], pa.string())
        n = self.dead_letter.write(ctx, bad_rows, reason_col)
        ctx.dead_letters[self.dead_letter.description] = ctx.dead_letters.get(self.dead_letter.description, 0) + n
        return table.filter(pa.array(ok))

    def describe(self) -> str:
        return f"ParseJson({self.column}: {self.json_schema})"

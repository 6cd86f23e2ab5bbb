"""The accumulators of a streaming aggregation (count, sum, min, max, avg, first, last), shared by
operators/aggregate.py (plain keys, tumbling and sliding windows) and operators/session_window.py.

Contract: `partial_sql()` aggregates a batch's rows of one group into accumulator columns
__a0.. (avg is two: sum and count); `merge(new, old)` combines them with the stored value tuples
of the same groups (None: a new group), by Arrow kernels when every accumulator's type allows,
else by the equivalent DuckDB SQL (the same result); `finalize` turns accumulator columns into
the output columns. The value tuple a group stores is its accumulators in `accs` order, typed as
`value_fields()` records them in the state schema.

Overflow (Spark 4's ANSI mode, its default): a sum of integers is a BIGINT and never wraps around.
A batch's partial sum that does not fit fails in its SQL (`error('<OVERFLOW_MARK><i>')`, see
overflow_error), and so does a merge whose sum of old and new does not fit; the operator raises
ArithmeticOverflowError naming the aggregate, its column, the batch and itself. avg sums in DOUBLE
(as Spark's avg of an integer column), so it does not overflow; count is a BIGINT of row counts.
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import AnalysisException, ArithmeticOverflowError
from ..functions import AggExpr
from ..sql import quote_ident, run_sql
from ..nested_order import is_nested, least_sql, min_max_sql
from ..types import arrow_to_duckdb, state_type_name
from .key_codec import _has_map, as_type


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
#: the text of the DuckDB error a partial sum out of BIGINT's range raises (followed by the accumulator index)
OVERFLOW_MARK = "increments-overflow:"


class Accumulators:
    """The accumulators of a list of AggExpr over an input schema: partial SQL, merge SQL, finalize."""

    def __init__(self, aggs: tuple[AggExpr, ...], schema: pa.Schema, where: str):
        self.aggs = aggs
        self.accs: list[tuple[str, pa.DataType, str, str]] = []   # name, type, partial sql, merge kind
        self.out_fields: list[pa.Field] = []
        for a in aggs:
            if a.func not in ("count", "sum", "min", "max", "avg", "first", "last"):
                raise AnalysisException(f"{where}: unknown aggregate {a.func!r}")
            if a.column is not None and a.column not in schema.names:
                raise AnalysisException(f"{where}: {a.func}({a.column!r}): no such column (columns: {schema.names})")
            t = schema.field(a.column).type if a.column is not None else None
            c = quote_ident(a.column) if a.column is not None else None
            name = a.output_name
            if a.func == "count":
                self.accs.append((name, pa.int64(), f"count({c})" if c else "count(*)", "add"))
                self.out_fields.append(pa.field(name, pa.int64()))
            elif a.func in ("sum", "avg"):
                if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
                    raise AnalysisException(f"{where}: {a.func}({a.column!r}) needs a numeric column, not {t}")
                st = pa.int64() if pa.types.is_integer(t) and a.func == "sum" else pa.float64()
                if st == pa.int64():   # sum(BIGINT) is a HUGEINT in DuckDB: out of BIGINT's range fails
                    i = len(self.accs)
                    partial = (f"CASE WHEN sum({c}) IS NULL OR sum({c}) BETWEEN {INT64_MIN} AND {INT64_MAX} "
                               f"THEN CAST(sum({c}) AS BIGINT) "
                               f"ELSE error('{OVERFLOW_MARK}{i}') END")
                else:
                    partial = f"CAST(sum({c}) AS {arrow_to_duckdb(st)})"
                self.accs.append((name + (".sum" if a.func == "avg" else ""), st, partial, "sum"))
                if a.func == "avg":
                    self.accs.append((name + ".count", pa.int64(), f"count({c})", "add"))
                self.out_fields.append(pa.field(name, st))
            elif a.func in ("min", "max"):
                if _has_map(t):
                    raise AnalysisException(
                        f"{where}: {a.func}({a.column!r}): a MAP column has no order, so Spark refuses it "
                        "(DATATYPE_MISMATCH.INVALID_ORDERING_TYPE); take the min/max of one of its values instead")
                # Spark's order also for STRUCT / list values (NULL parts first: nested_order.py)
                self.accs.append((name, t, min_max_sql(a.func, c, t), a.func))
                self.out_fields.append(pa.field(name, t))
            else:
                self.accs.append((name, t, f"{a.func}({c} ORDER BY __rn)", a.func))
                self.out_fields.append(pa.field(name, t))

    def functions(self) -> list[str]:
        """Each aggregate as `func(input) AS name` (PhysicalOp.state_functions)."""
        return [f"{a.func}({a.column if a.column is not None else '*'}) AS {a.output_name}" for a in self.aggs]

    @property
    def types(self) -> list[pa.DataType]:
        return [t for _, t, _, _ in self.accs]

    def partial_sql(self) -> str:
        return ", ".join(f"{sql} AS __a{i}" for i, (_, _, sql, _) in enumerate(self.accs))

    def merge(self, new: pa.Table, old: list[tuple | None]) -> pa.Table:
        """Accumulators of `new` (columns __a<i>) merged with the old value tuples (None = new group)."""
        return self.merge_columns(new, [pa.array([o[i] if o is not None else None for o in old], type=t)
                                        for i, t in enumerate(self.types)],
                                  pa.array([o is not None for o in old], pa.bool_()))

    def merge_columns(self, new: pa.Table, old: list[pa.Array], existed: pa.Array) -> pa.Table:
        """`merge` with the old values as columns (accumulator i of every group, null for a new
        group) and whether each group was stored."""
        cols: dict[str, Any] = {f"__a{i}": new.column(f"__a{i}") for i in range(len(self.accs))}
        for i, t in enumerate(self.types):
            cols[f"__o{i}"] = old[i] if old[i].type == t else old[i].cast(t)
        cols["__existed"] = existed
        self._check_merge_overflow(cols)
        fast = self._merge_arrow(cols)
        if fast is not None:
            return fast
        exprs = []
        for i, (_, t, _, kind) in enumerate(self.accs):
            a, o = f"__a{i}", f"__o{i}"
            e = {"add": f"coalesce({o}, 0) + {a}",
                 "sum": f"CASE WHEN {o} IS NULL THEN {a} WHEN {a} IS NULL THEN {o} ELSE {o} + {a} END",
                 "min": least_sql("min", o, a, t), "max": least_sql("max", o, a, t),
                 "first": f"CASE WHEN __existed THEN {o} ELSE {a} END", "last": a}[kind]
            exprs.append(f"{e} AS __a{i}")
        out = run_sql(f"SELECT {', '.join(exprs)} FROM __m", {"__m": pa.table(cols)})
        return pa.table([out.column(i).cast(t) for i, t in enumerate(self.types)],
                        names=[f"__a{i}" for i in range(len(self.accs))])

    def _check_merge_overflow(self, cols: dict[str, Any]) -> None:
        """ArithmeticOverflowError (without the batch: the operator adds it) when a stored integer
        sum or count plus the batch's does not fit its type."""
        for i, (_, t, _, kind) in enumerate(self.accs):
            if kind in ("add", "sum") and pa.types.is_integer(t):
                try:
                    pc.add_checked(pc.fill_null(cols[f"__o{i}"], 0), pc.fill_null(cols[f"__a{i}"], 0))
                except pa.ArrowInvalid:
                    raise self.overflow(i) from None

    def overflow(self, i: int) -> ArithmeticOverflowError:
        """The overflow error of accumulator `i` (the operator prefixes query, batch and itself)."""
        agg = self._agg_of(i)
        what = f"{agg.func}({agg.column!r})" if agg.column is not None else f"{agg.func}(*)"
        return ArithmeticOverflowError(
            f"{what} AS {agg.output_name!r}: BIGINT overflow, a group's sum of column {agg.column!r} is beyond "
            f"{INT64_MIN}..{INT64_MAX} (Spark 4 raises ARITHMETIC_OVERFLOW here, in ANSI mode, its default; the sum "
            f"does not wrap around). Sum a DOUBLE instead (with_column({agg.column!r}, 'CAST({agg.column} AS DOUBLE)') "
            f"before the aggregation), or keep the values smaller; the batch is not committed.")

    def _agg_of(self, i: int) -> AggExpr:
        j = 0
        for a in self.aggs:
            n = 2 if a.func == "avg" else 1
            if i < j + n:
                return a
            j += n
        raise IndexError(i)

    def overflow_error(self, e: BaseException) -> ArithmeticOverflowError | None:
        """The overflow error `e` (a DuckDB error from partial_sql's query) stands for, if any."""
        text = str(e)
        at = text.find(OVERFLOW_MARK)
        if at < 0:
            return None
        digits = ""
        for ch in text[at + len(OVERFLOW_MARK):]:
            if not ch.isdigit():
                break
            digits += ch
        return self.overflow(int(digits)) if digits else None

    def _merge_arrow(self, cols: dict[str, Any]) -> pa.Table | None:
        """`merge` by Arrow compute kernels (the same rules as its SQL); None when a kernel does not
        support a type, and the SQL decides."""
        out = []
        try:
            for i, (_, t, _, kind) in enumerate(self.accs):
                a, o = cols[f"__a{i}"], cols[f"__o{i}"]
                if kind in ("min", "max") and is_nested(t):
                    return None          # Spark's nested order: the SQL (nested_order.py)
                if kind == "add":
                    m = pc.add(pc.fill_null(o, 0), a)
                elif kind == "sum":
                    m = pc.coalesce(pc.add(o, a), o, a)
                elif kind == "min":
                    m = pc.min_element_wise(o, a, skip_nulls=True)
                elif kind == "max":
                    m = pc.max_element_wise(o, a, skip_nulls=True)
                elif kind == "first":
                    m = pc.if_else(cols["__existed"], o, a)
                else:
                    m = a
                out.append(as_type(m, t))
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
            return None
        return pa.table(out, names=[f"__a{i}" for i in range(len(self.accs))])

    def finalize(self, acc_cols: list[pa.Array]) -> list[pa.Array]:
        out, i = [], 0
        for a in self.aggs:
            if a.func == "avg":
                s, c = acc_cols[i], acc_cols[i + 1]
                out.append(pc.if_else(pc.equal(c, 0), pa.scalar(None, pa.float64()),
                                      pc.divide(s.cast(pa.float64()), c.cast(pa.float64()))))
                i += 2
            else:
                out.append(acc_cols[i])
                i += 1
        return out

    def value_fields(self) -> list[tuple[str, str]]:
        return [(name, state_type_name(t)) for name, t, _, _ in self.accs]

"""The accumulators of a streaming aggregation (count, sum, min, max, avg, first, last), shared by
operators/aggregate.py (plain keys, tumbling and sliding windows) and operators/session_window.py.

Contract: `partial_sql()` aggregates a batch's rows of one group into accumulator columns
__a0.. (avg is two: sum and count); `merge(new, old)` combines them with the stored value tuples
of the same groups (None: a new group), by Arrow kernels when every accumulator's type allows,
else by the equivalent DuckDB SQL (the same result); `finalize` turns accumulator columns into
the output columns. The value tuple a group stores is its accumulators in `accs` order, typed as
`value_fields()` records them in the state schema.
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import AnalysisException
from ..functions import AggExpr
from ..sql import quote_ident, run_sql
from ..nested_order import is_nested, least_sql, min_max_sql
from ..types import arrow_to_duckdb, state_type_name
from .key_codec import _has_map


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
                self.accs.append((name + (".sum" if a.func == "avg" else ""), st,
                                  f"CAST(sum({c}) AS {arrow_to_duckdb(st)})", "sum"))
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

    @property
    def types(self) -> list[pa.DataType]:
        return [t for _, t, _, _ in self.accs]

    def partial_sql(self) -> str:
        return ", ".join(f"{sql} AS __a{i}" for i, (_, _, sql, _) in enumerate(self.accs))

    def merge(self, new: pa.Table, old: list[tuple | None]) -> pa.Table:
        """Accumulators of `new` (columns __a<i>) merged with the old value tuples (None = new group)."""
        cols: dict[str, Any] = {f"__a{i}": new.column(f"__a{i}") for i in range(len(self.accs))}
        for i, t in enumerate(self.types):
            cols[f"__o{i}"] = pa.array([o[i] if o is not None else None for o in old], type=t)
        cols["__existed"] = pa.array([o is not None for o in old], pa.bool_())
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
                out.append(m.cast(t))
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

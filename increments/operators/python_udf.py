"""Python UDFs evaluated on Arrow between DuckDB stages (increments/udf.py plans them).

UdfEval(child, udfs, tokens, args, displays, outputs): UdfOp calls each UDF on its argument
columns of the child (plain input columns, inner UDF results, or hidden `<token>_a<j>` columns
the SQL stage below computed, dropped here) and outputs the child's other columns plus one result
column per UDF (`<token>`, or the with_column name, replaced in place), of its return type.
DropColumns(child, names) removes hidden columns (Arrow, no copy). Both keep the child's alias and
qualifiers, so `alias.column` references still resolve above them.

Calling convention per batch (module doc of increments/udf.py):
- row:    fn(*values) for each row (Python values, None for NULL), in row order;
- pandas: fn(*Series) once over the batch (pandas Series, one per argument), a Series back;
- arrow:  fn(*Arrays) once over the batch (pyarrow Arrays), an Array / ChunkedArray back.
A batch without rows calls nothing. The result must have one value per row and convert to the
return type. On failure: PythonUdfError naming the query, batch, UDF, the first failing row and
its input; for a vectorized UDF the row is found by calling it again on one row at a time.
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..errors import AnalysisException
from ..plan.udf_nodes import UdfEval
from ..plan.udf_rewrite import expand_filter
from ..sql import quote_ident
from ..udf import PythonUdfError, UserDefinedFunction
from .base import BatchContext, PhysicalOp
from .stateless import SqlOp

#: rows tried one at a time to find a vectorized UDF's failing row
LOCATE_LIMIT = 100_000


def _value_repr(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 200 else r[:197] + "..."


class UdfOp(PhysicalOp):
    def __init__(self, child: PhysicalOp, node: UdfEval):
        names = child.schema.names
        lower = {c.lower(): c for c in names}
        args = []
        for u, d, cols in zip(node.udfs, node.displays, node.args):
            resolved = []
            for c in cols:
                if c not in names and c.lower() not in lower:
                    raise AnalysisException(f"{d}: no column {c!r} (columns: {names})")
                resolved.append(c if c in names else lower[c.lower()])
            args.append(tuple(resolved))
        outputs = [o or t for o, t in zip(node.outputs or (None,) * len(node.tokens), node.tokens)]
        self.calls = list(zip(node.udfs, outputs, args, node.displays))
        hidden_args = {c for cols in node.args for c in cols if any(c.startswith(t + "_a") for t in node.tokens)}
        by_name = {f.name: f for f in child.schema if f.name not in hidden_args}
        for u, out, _, _ in self.calls:
            by_name[out] = pa.field(out, u.return_type)      # replaced in place, or appended
        super().__init__([child], pa.schema(list(by_name.values())))
        for _, out, _, _ in self.calls:                      # a computed column is no event time
            self.event_time_cols.pop(out, None)
        self.alias, self.qualifiers = child.alias, child.qualifiers

    def describe(self) -> str:
        return "PythonUDF[" + ", ".join(f"{d} = {u.describe()}" for u, _, _, d in self.calls) + "]"

    def udf_descriptions(self) -> list[str]:
        return [u.describe() for u, _, _, _ in self.calls]

    def columns_read(self, needed: set[str] | None) -> set[str] | None:
        if needed is None:
            return None
        outs = {out for _, out, _, _ in self.calls}
        return (needed - outs) | {c for _, _, cols, _ in self.calls for c in cols}

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        results = {}
        for udf, out, cols, display in self.calls:
            args = [_as_array(table.column(c)) for c in cols]
            results[out] = evaluate(ctx, udf, display, args, table.num_rows)
        arrays = [results.pop(f.name) if f.name in results else table.column(f.name) for f in self.schema]
        return pa.Table.from_arrays(arrays, schema=self.schema)


def _as_array(col: Any) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _fail(ctx: BatchContext, udf: UserDefinedFunction, display: str, args: list[pa.Array], row: int | None,
          what: str, cause: BaseException | None = None) -> PythonUdfError:
    inputs = None
    where = ""
    if row is not None:
        inputs = [a[row].as_py() for a in args]
        where = f" on row {row} of the batch, input ({', '.join(_value_repr(v) for v in inputs)})"
    err = f": {type(cause).__name__}: {cause}" if cause is not None else ""
    msg = ctx.where(f"{udf.kind} UDF {udf.qualified_name} (called as {display}) {what}{where}{err}. Fix the "
                    "function (or the data); nothing of this batch was committed, and a restart runs it again.")
    return PythonUdfError(msg, function=udf.qualified_name, batch_id=ctx.batch_id, row=row, input=inputs)


def evaluate(ctx: BatchContext, udf: UserDefinedFunction, display: str, args: list[pa.Array], n_rows: int) -> pa.Array:
    rt = udf.return_type
    if n_rows == 0:
        return pa.array([], rt)
    if udf.kind == "row":
        return _row_at_a_time(ctx, udf, display, args, n_rows)
    inputs = args if udf.kind == "arrow" else [_pandas(udf, ctx, a) for a in args]
    try:
        raw = udf.func(*inputs)
    except Exception as e:  # noqa: BLE001 - user code
        row = _locate(udf, args, n_rows)
        raise _fail(ctx, udf, display, args, row, "raised" if row is not None else
                    "raised on the batch as a whole (no single row reproduces it)", e) from e
    try:
        result = _to_arrow(raw, rt)
    except Exception as e:  # noqa: BLE001 - name the first value that does not convert, if one alone fails
        row, value = _bad_value(raw, rt)
        what = (f"returned {_value_repr(value)}, which is not a {rt}," if row is not None
                else f"returned values that do not convert to {rt}")
        raise _fail(ctx, udf, display, args, row, what, e) from e
    if len(result) != n_rows:
        raise _fail(ctx, udf, display, args, None, f"returned {len(result)} values for {n_rows} rows (a vectorized "
                    "UDF returns one value per input row)")
    return result


def _pandas(udf: UserDefinedFunction, ctx: BatchContext, a: pa.Array) -> Any:
    try:
        import pandas  # noqa: F401, PLC0415 - optional: tells whether pandas is installed
    except ImportError:
        raise PythonUdfError(ctx.where(f"pandas UDF {udf.qualified_name} needs pandas: pip install "
                                       "'increments[pandas]' (or use F.arrow_udf, which needs nothing more)"),
                             function=udf.qualified_name, batch_id=ctx.batch_id) from None
    return a.to_pandas()


def _call_vectorized(udf: UserDefinedFunction, args: list[pa.Array]) -> Any:
    if udf.kind == "arrow":
        return udf.func(*args)
    return udf.func(*[a.to_pandas() for a in args])


def _to_arrow(raw: Any, rt: pa.DataType) -> pa.Array:
    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks()
    if isinstance(raw, pa.Array):
        return raw if raw.type == rt else raw.cast(rt)
    try:
        import pandas as pd  # noqa: PLC0415 - optional: tells whether pandas is installed
        if isinstance(raw, pd.DataFrame):
            raise TypeError("a DataFrame is not a column: return a pandas Series")
        if isinstance(raw, pd.Series):
            return pa.Array.from_pandas(raw, type=rt)
    except ImportError:
        pass
    return pa.array(list(raw), type=rt)


def _bad_value(raw: Any, rt: pa.DataType) -> tuple[int | None, Any]:
    try:
        values = raw.to_pylist() if isinstance(raw, (pa.Array, pa.ChunkedArray)) else list(raw)
    except Exception:  # noqa: BLE001
        return None, None
    for i, v in enumerate(values):
        try:
            _to_arrow(raw.iloc[i:i + 1] if hasattr(raw, "iloc") else [v], rt)
        except Exception:  # noqa: BLE001
            return i, v
    return None, None


def _locate(udf: UserDefinedFunction, args: list[pa.Array], n_rows: int) -> int | None:
    """The first row on which the vectorized UDF alone raises (or None)."""
    for i in range(min(n_rows, LOCATE_LIMIT)):
        try:
            _call_vectorized(udf, [a.slice(i, 1) for a in args])
        except Exception:  # noqa: BLE001
            return i
    return None


def _row_at_a_time(ctx: BatchContext, udf: UserDefinedFunction, display: str, args: list[pa.Array],
                   n_rows: int) -> pa.Array:
    fn, rt = udf.func, udf.return_type
    cols = [a.to_pylist() for a in args]
    out: list[Any] = []
    append = out.append
    i = 0
    try:
        if len(cols) == 1:
            for v in cols[0]:
                append(fn(v))
                i += 1
        else:
            for row in zip(*cols) if cols else ((),) * n_rows:
                append(fn(*row))
                i += 1
    except Exception as e:  # noqa: BLE001 - user code
        raise _fail(ctx, udf, display, args, i, "raised", e) from e
    try:
        return pa.array(out, type=rt)
    except Exception as e:  # noqa: BLE001 - find the value that does not convert
        for j, v in enumerate(out):
            try:
                pa.array([v], type=rt)
            except Exception as e2:  # noqa: BLE001
                raise _fail(ctx, udf, display, args, j, f"returned {_value_repr(v)}, which is not a {rt}", e2) from e2
        raise _fail(ctx, udf, display, args, None, f"returned values that do not convert to {rt}", e) from e


class DropColumnsOp(PhysicalOp):
    def __init__(self, child: PhysicalOp, names: tuple[str, ...]):
        self.names = [c for c in names if c in child.schema.names]
        super().__init__([child], pa.schema([f for f in child.schema if f.name not in self.names]))
        self.alias, self.qualifiers = child.alias, child.qualifiers

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        return table.drop_columns(self.names) if self.names else table

    def describe(self) -> str:
        return f"Drop[{', '.join(self.names)}]"

    def columns_read(self, needed: set[str] | None) -> set[str] | None:
        return None if needed is None else needed | set(self.names)


def build_udf_eval(compiler: Any, node: UdfEval) -> PhysicalOp:
    return UdfOp(compiler.build(node.child), node)


def build_drop_columns(compiler: Any, node: Any) -> PhysicalOp:
    """Over a fused SQL stage the drop is one more stage of it (`* EXCLUDE`), so the stateless
    steps above fuse with it into the same DuckDB query; else an Arrow drop."""
    child = compiler.build(node.child)
    names = [c for c in node.names if c in child.schema.names]
    if not names:
        return child
    if isinstance(child, SqlOp):
        cols = ", ".join(quote_ident(c) for c in names)
        stage = (lambda rel, c=cols: f"SELECT * EXCLUDE ({c}) FROM {rel} AS __in")
        op = SqlOp(child.children[0], child.stages + [stage], pa.schema([f for f in child.schema if f.name not in names]),
                   child.labels + [f"Drop[{', '.join(names)}]"])
        op.event_time_cols = {k: v for k, v in child.event_time_cols.items() if k not in names}
        op.alias, op.qualifiers = child.alias, child.qualifiers
        return op
    return DropColumnsOp(child, tuple(names))


def build_udf_filter(compiler: Any, node: Any) -> PhysicalOp:
    return compiler.build(expand_filter(node))

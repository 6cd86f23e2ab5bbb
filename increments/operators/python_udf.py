"""Python UDFs evaluated on Arrow between DuckDB stages (increments/udf.py plans them).

UdfEval(child, udfs, tokens, arities, displays): the child carries each UDF's argument columns
`<token>_a<j>` (computed by the SQL stage below); UdfOp calls the UDFs on those Arrow columns and
outputs the child's other columns plus one result column `<token>` per UDF, of its return type.
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

from ..plan.udf_nodes import UdfEval
from ..udf import PythonUdfError, UserDefinedFunction
from .base import BatchContext, PhysicalOp

#: rows tried one at a time to find a vectorized UDF's failing row
LOCATE_LIMIT = 100_000


def _value_repr(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 200 else r[:197] + "..."


class UdfOp(PhysicalOp):
    def __init__(self, child: PhysicalOp, node: UdfEval):
        self.calls = list(zip(node.udfs, node.tokens, node.arities, node.displays))
        arg_cols = {f"{t}_a{j}" for _, t, k, _ in self.calls for j in range(k)}
        fields = [f for f in child.schema if f.name not in arg_cols]
        fields += [pa.field(t, u.return_type) for u, t, _, _ in self.calls]
        super().__init__([child], pa.schema(fields))
        self._keep = [f.name for f in child.schema if f.name not in arg_cols]
        self.alias, self.qualifiers = child.alias, child.qualifiers

    def describe(self) -> str:
        return "PythonUDF[" + ", ".join(f"{d} = {u.describe()}" for u, _, _, d in self.calls) + "]"

    def udf_descriptions(self) -> list[str]:
        return [u.describe() for u, _, _, _ in self.calls]

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        out = table.select(self._keep)
        for udf, token, arity, display in self.calls:
            args = [_as_array(table.column(f"{token}_a{j}")) for j in range(arity)]
            result = evaluate(ctx, udf, display, args, table.num_rows)
            out = out.append_column(pa.field(token, udf.return_type), result)
        return out


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
    except Exception as e:  # noqa: BLE001
        raise _fail(ctx, udf, display, args, None, f"returned values that do not convert to {rt}", e) from e
    if len(result) != n_rows:
        raise _fail(ctx, udf, display, args, None, f"returned {len(result)} values for {n_rows} rows (a vectorized "
                    "UDF returns one value per input row)")
    return result


def _pandas(udf: UserDefinedFunction, ctx: BatchContext, a: pa.Array) -> Any:
    try:
        import pandas  # noqa: F401
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
        import pandas as pd
        if isinstance(raw, pd.DataFrame):
            raise TypeError("a DataFrame is not a column: return a pandas Series")
        if isinstance(raw, pd.Series):
            return pa.Array.from_pandas(raw, type=rt)
    except ImportError:
        pass
    return pa.array(list(raw), type=rt)


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


def build_drop_columns(compiler: Any, node: DropColumns) -> PhysicalOp:
    child = compiler.build(node.child)
    if not node.names:
        return child
    return DropColumnsOp(child, node.names)

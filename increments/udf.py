"""Python logic inside a query: `F.udf`, `F.pandas_udf`, `F.arrow_udf` and the column expressions
their calls make (PySpark's Column, for the expressions that hold a UDF result).

    normalise = F.udf(lambda s: s.strip().lower(), "string")       # row at a time
    @F.pandas_udf("double")                                        # vectorized: pandas Series in/out
    def cents(amount): return amount * 100
    @F.arrow_udf("bigint")                                         # vectorized: pyarrow arrays in/out
    def length(s): return pc.utf8_length(s)

    frame.select("id", normalise("campaign_id").alias("c"))
         .filter(cents("amount") > 100)                             # Column operators, as in PySpark
         .with_column("n", length("c"))
         .group_by(F.window("event_time", "1 hour"), normalise("campaign_id")).count()

Contract:
- A UDF call `f(*args)` takes column names or DuckDB SQL expressions (a bare name is quoted, so
  `window`, `count` work) or other calls (nested UDFs), and returns a `Column`. Its SQL text
  (`str(col)`) refers to a hidden column `"__udf_<n>"`; the frame methods (select, filter /
  where, with_column, group_by) see such references, in a Column or inside SQL text
  (`f"{f('x')} > 3"`), and evaluate the UDFs below the step (plan/udf_rewrite.py): one SQL stage computes
  the arguments, the UDF runs on the Arrow columns between DuckDB stages (operators/python_udf.py;
  no Python function is registered inside DuckDB), then the step's own SQL reads the result
  column, which is dropped after it.
- Unaliased in select, a call is named as Spark names it: `fname(arg, ...)`; so is a group_by key.
- Row UDFs get Python values (None for NULL) and return one value per row (None is NULL); a
  vectorized UDF gets one pandas Series / pyarrow Array per argument for the whole batch and
  returns as many values. Results are converted to the declared return type (a Spark DDL string
  such as "string", "bigint", "double", "array<string>" or a pyarrow DataType); a value that does
  not convert fails the batch.
- An exception in user code fails the batch with a PythonUdfError naming the query, batch, UDF
  (qualified name), the first failing row (index and input values) and the original error (kept
  as __cause__). A vectorized UDF is re-run one row at a time to find that row.
- The query's checkpoint conf records every UDF it uses (`describe()`: kind, qualified name,
  return type and a hash of its code), so `increments check` shows a changed UDF (an allowed,
  stateless change, as in Spark; flagged, since a UDF feeding a grouping key changes the keys).
"""
from __future__ import annotations

import hashlib
import itertools
import re
import threading
from typing import Any, Callable

from .lazy import lazy_module

from .errors import IncrementsError
from .identifiers import duckdb_ident
from .types import arrow_to_duckdb, parse_schema, state_type_name

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py

KINDS = ("row", "pandas", "arrow")

_counter = itertools.count(1)
_lock = threading.Lock()
#: hidden column token -> the call that computes it (frames find calls through the SQL text:
#: plan/udf_rewrite.py, plan/udf_pushdown.py)
_CALLS: dict[str, "UdfCall"] = {}
_TOKEN = re.compile(r'(?<![\w"])"?(__udf_\d+)"?(?!\w)')   # quoted, or bare as DuckDB prints it back
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTED = re.compile(r'"((?:[^"]|"")+)"')


quote_ident = duckdb_ident     # increments/identifiers.py (not increments.sql: that loads DuckDB)


class PythonUdfError(IncrementsError):
    """User code of a UDF or a map_in_* function raised (or returned something unusable); the
    batch failed uncommitted. Attributes: function, batch_id, row (index in the batch or None),
    input (the row's argument values or None)."""

    def __init__(self, message: str, *, function: str, batch_id: int | None, row: int | None = None,
                 input: Any = None):  # noqa: A002 - the row's input
        super().__init__(message)
        self.function, self.batch_id, self.row, self.input = function, batch_id, row, input


def parse_return_type(return_type: Any, what: str) -> pa.DataType:
    """A Spark DDL type string ("string", "bigint", "array<string>", ...) or an Arrow type."""
    if isinstance(return_type, pa.DataType):
        return return_type
    arrow = getattr(return_type, "arrow_type", None)     # increments.types.Field
    if isinstance(arrow, pa.DataType):
        return arrow
    if not isinstance(return_type, str) or not return_type.strip():
        raise TypeError(f"{what}: return type {return_type!r}: give a Spark DDL type string such as 'string', "
                        "'bigint', 'double', 'boolean', 'timestamp' or a pyarrow DataType")
    try:
        return parse_schema(f"__r {return_type.strip()}").fields[0].arrow_type
    except ValueError as e:
        raise TypeError(f"{what}: return type {return_type!r}: {e}") from None


def qualified_name(fn: Callable) -> str:
    mod = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return f"{mod}.{name}"


def code_hash(fn: Callable) -> str:
    """A short hash of the function's code (bytecode, constants, names): changes when its body does."""
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "__call__", None), "__code__", None)
    if code is None:
        return "?"
    h = hashlib.sha256()

    def add(c) -> None:
        h.update(c.co_code)
        for k in c.co_consts:
            if hasattr(k, "co_code"):
                add(k)
            else:
                h.update(repr(k).encode())
        h.update(repr(c.co_names).encode())
    add(code)
    return h.hexdigest()[:12]


class UserDefinedFunction:
    """A Python function usable in expressions (module doc). Call it on columns to get a Column."""

    def __init__(self, fn: Callable, return_type: Any, kind: str, name: str | None = None):
        if not callable(fn):
            raise TypeError(f"udf: {fn!r} is not callable")
        if kind not in KINDS:
            raise ValueError(f"udf kind {kind!r}: one of {KINDS}")
        self.func, self.kind = fn, kind
        self.return_type = parse_return_type(return_type, f"{kind} udf {qualified_name(fn)}")
        self.__name__ = name or getattr(fn, "__name__", None) or "udf"
        if self.__name__ == "<lambda>":
            self.__name__ = "<lambda>"
        self.qualified_name = qualified_name(fn)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.deterministic = True

    @property
    def returnType(self) -> pa.DataType:  # noqa: N802 - PySpark's name
        return self.return_type

    def as_nondeterministic(self) -> "UserDefinedFunction":
        self.deterministic = False
        return self

    asNondeterministic = as_nondeterministic

    def describe(self) -> str:
        return (f"{self.kind} udf {self.qualified_name} -> {state_type_name(self.return_type)} "
                f"[code {code_hash(self.func)}]")

    def __call__(self, *args: Any) -> "UdfCall":
        return UdfCall(self, tuple(args))

    def __repr__(self) -> str:
        return f"UserDefinedFunction({self.describe()})"


def _literal(v: Any) -> str:
    if isinstance(v, Column):
        return v.sql
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    raise TypeError(f"cannot use {v!r} ({type(v).__name__}) in a column expression")


def _display(v: Any) -> str:
    return v.display if isinstance(v, Column) else str(v) if not isinstance(v, str) else repr(v)


class Column:
    """A column expression holding UDF results: `sql` (DuckDB SQL over the hidden result columns),
    `display` (the name Spark would give it), `name` (an alias, or None). PySpark's operators
    build bigger expressions: comparisons, + - * / %, & | ~ (and, or, not), is_null."""

    def __init__(self, sql: str, display: str, name: str | None = None):
        self.sql, self.display, self.name = sql, display, name

    def alias(self, name: str) -> "Column":
        return Column(self.sql, self.display, str(name))

    name_as = alias

    def __str__(self) -> str:
        return f"{self.sql} AS {quote_ident(self.name)}" if self.name else self.sql

    def __repr__(self) -> str:
        return f"Column<{self.display}{' AS ' + self.name if self.name else ''}>"

    def _bin(self, op: str, other: Any, reverse: bool = False) -> "Column":
        a, b = (_literal(other), self.sql) if reverse else (self.sql, _literal(other))
        da, db = (_display(other), self.display) if reverse else (self.display, _display(other))
        return Column(f"({a} {op} {b})", f"({da} {op} {db})")

    def __eq__(self, other): return self._bin("=", other)  # type: ignore[override]  # noqa: E704
    def __ne__(self, other): return self._bin("<>", other)  # type: ignore[override]  # noqa: E704
    def __lt__(self, other): return self._bin("<", other)  # noqa: E704
    def __le__(self, other): return self._bin("<=", other)  # noqa: E704
    def __gt__(self, other): return self._bin(">", other)  # noqa: E704
    def __ge__(self, other): return self._bin(">=", other)  # noqa: E704
    def __add__(self, other): return self._bin("+", other)  # noqa: E704
    def __radd__(self, other): return self._bin("+", other, True)  # noqa: E704
    def __sub__(self, other): return self._bin("-", other)  # noqa: E704
    def __rsub__(self, other): return self._bin("-", other, True)  # noqa: E704
    def __mul__(self, other): return self._bin("*", other)  # noqa: E704
    def __rmul__(self, other): return self._bin("*", other, True)  # noqa: E704
    def __truediv__(self, other): return self._bin("/", other)  # noqa: E704
    def __rtruediv__(self, other): return self._bin("/", other, True)  # noqa: E704
    def __mod__(self, other): return self._bin("%", other)  # noqa: E704
    def __and__(self, other): return self._bin("AND", other)  # noqa: E704
    def __rand__(self, other): return self._bin("AND", other, True)  # noqa: E704
    def __or__(self, other): return self._bin("OR", other)  # noqa: E704
    def __ror__(self, other): return self._bin("OR", other, True)  # noqa: E704

    def __invert__(self) -> "Column":
        return Column(f"(NOT {self.sql})", f"(NOT {self.display})")

    def __neg__(self) -> "Column":
        return Column(f"(- {self.sql})", f"(- {self.display})")

    def is_null(self) -> "Column":
        return Column(f"({self.sql} IS NULL)", f"({self.display} IS NULL)")

    def is_not_null(self) -> "Column":
        return Column(f"({self.sql} IS NOT NULL)", f"({self.display} IS NOT NULL)")

    isNull, isNotNull = is_null, is_not_null

    def cast(self, type_text: str) -> "Column":
        t = arrow_to_duckdb(parse_return_type(type_text, "cast"))
        return Column(f"CAST({self.sql} AS {t})", f"CAST({self.display} AS {type_text})")

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError("a Column cannot be used as a Python bool: combine conditions with & | ~, not and/or/not")


class UdfCall(Column):
    """One call of a UDF on argument expressions; computes the hidden column `token`."""

    def __init__(self, udf: UserDefinedFunction, args: tuple[Any, ...], name: str | None = None,
                 token: str | None = None):
        if token is None:
            with _lock:
                token = f"__udf_{next(_counter)}"
        self.udf, self.args, self.token = udf, args, token
        self.arg_sql = tuple(_arg_sql(a) for a in args)
        display = f"{udf.__name__}({', '.join(_arg_display(a) for a in args)})"
        super().__init__(quote_ident(token), display, name)
        _CALLS[token] = self

    def alias(self, name: str) -> "UdfCall":
        return UdfCall(self.udf, self.args, str(name), token=self.token)


def _arg_display(a: Any) -> str:
    """As Spark names an argument: an inner call by its own name, `alias.col` as `col`."""
    if isinstance(a, Column):
        return a.display
    m = re.fullmatch(r"[A-Za-z_]\w*\.([A-Za-z_]\w*)", str(a))
    if m:
        return m.group(1)
    q = _QUOTED.fullmatch(str(a))       # F.col("x") is '"x"'
    return q.group(1).replace('""', '"') if q else str(a)


def _arg_sql(a: Any) -> str:
    if isinstance(a, Column):
        return a.sql
    if isinstance(a, str):
        return quote_ident(a) if _IDENT.fullmatch(a) else a
    raise TypeError(f"udf argument {a!r}: pass a column name, a SQL expression or another UDF call")


# -- the public constructors (re-exported by increments.functions) -----------------------------
def _make(kind: str, f: Any, return_type: Any, default: Any, what: str):
    if isinstance(f, (str, pa.DataType)) and return_type is None:   # @F.udf("int")
        f, return_type = None, f
    if return_type is None:
        return_type = default
    if return_type is None:
        raise TypeError(f"{what}: a return type is required, e.g. {what}(fn, 'double') or @{what}('double')")
    if f is None:
        return lambda fn: UserDefinedFunction(fn, return_type, kind)
    return UserDefinedFunction(f, return_type, kind)


def udf(f: Any = None, returnType: Any = None, *, return_type: Any = None,  # noqa: N803 - PySpark's name
        useArrow: Any = None) -> Any:  # noqa: N803
    """A row-at-a-time UDF: `F.udf(fn, "string")`, `@F.udf`, `@F.udf("int")`,
    `@F.udf(returnType="int")`. The return type defaults to STRING, as in PySpark."""
    return _make("row", f, return_type if return_type is not None else returnType, "string", "udf")


def pandas_udf(f: Any = None, returnType: Any = None, functionType: Any = None, *,  # noqa: N803
               return_type: Any = None) -> Any:
    """A vectorized UDF over pandas Series (one per argument) returning a Series of the same
    length: `F.pandas_udf(fn, "double")`, `@F.pandas_udf("double")`."""
    if functionType not in (None, 200, "scalar", "SCALAR"):
        raise ValueError(f"pandas_udf: functionType={functionType!r}: only scalar (Series to Series) UDFs are "
                         "supported; use frame.map_in_pandas for DataFrame iterators")
    return _make("pandas", f, return_type if return_type is not None else returnType, None, "pandas_udf")


def arrow_udf(f: Any = None, returnType: Any = None, *, return_type: Any = None) -> Any:  # noqa: N803
    """A vectorized UDF over pyarrow Arrays (one per argument) returning an Array (or ChunkedArray)
    of the same length: `F.arrow_udf(fn, "bigint")`, `@F.arrow_udf("bigint")`."""
    return _make("arrow", f, return_type if return_type is not None else returnType, None, "arrow_udf")

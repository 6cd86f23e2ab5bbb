"""The frame methods' rewrite around UDF calls (increments/udf.py): select, filter / where,
with_column and group_by see the hidden `"__udf_<n>"` columns UDF calls refer to, in a Column or
inside SQL text, and evaluate the UDFs below the step (`plan_udfs`): one SQL stage computes the
arguments, one UdfEval node per nesting level runs the UDFs on the Arrow columns
(operators/python_udf.py), then the step's own SQL reads the result column, which is dropped
after it. A filter stays one UdfFilter node until compiling (plan/udf_pushdown.py places it),
then expand_filter gives the nodes that run it.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from ..errors import AnalysisException
from ..lazy import lazy_module
from ..udf import _CALLS, _TOKEN, Column, UdfCall, quote_ident
from . import nodes as n
from .udf_nodes import DropColumns, UdfEval, UdfFilter

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTED = re.compile(r'"((?:[^"]|"")+)"')


def calls_in(texts: Iterable[str]) -> list[UdfCall]:
    """The UDF calls the SQL texts refer to, nested ones included, each once, inner ones first."""
    seen: dict[str, UdfCall] = {}

    def visit(text: str) -> None:
        for tok in _TOKEN.findall(text):
            call = _CALLS.get(tok)
            if call is None or tok in seen:
                continue
            for a in call.arg_sql:
                visit(a)
            seen[tok] = call
    for t in texts:
        visit(t)
    return list(seen.values())


def has_udf(*exprs: Any) -> bool:
    return any(isinstance(e, Column) or (isinstance(e, str) and any(t in _CALLS for t in _TOKEN.findall(e)))
               for e in exprs)


def refuse(expr: Any, where: str) -> None:
    """TypeError when `expr` holds a UDF call where the engine does not evaluate one."""
    if has_udf(expr):
        raise TypeError(f"a UDF call in {where} is not supported: compute it first with "
                        "with_column(name, f(...)) and refer to that column")


def _levels(calls: list[UdfCall]) -> list[list[UdfCall]]:
    level: dict[str, int] = {}
    for c in calls:   # inner calls come first
        inner = [level[t] for a in c.arg_sql for t in _TOKEN.findall(a) if t in level]
        level[c.token] = 1 + max(inner, default=-1)
    out: list[list[UdfCall]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for c in calls:
        out[level[c.token]].append(c)
    return out


def _direct(c: UdfCall, j: int) -> str | None:
    """The input column argument j reads as it is (a plain column name, an inner call's result),
    or None when a SQL stage computes it."""
    a = c.args[j]
    if isinstance(a, UdfCall) and not a.name:
        return a.token
    if isinstance(a, str) and _IDENT.fullmatch(a):
        return a
    q = _QUOTED.fullmatch(a) if isinstance(a, str) else None
    return q.group(1).replace('""', '"') if q and not q.group(1).startswith("__udf_") else None


def plan_udfs(node: Any, texts: Iterable[str], output: tuple[str, str] | None = None) -> tuple[Any, list[str]]:
    """`node` with the result column of every UDF the texts refer to added (one UdfEval per nesting
    level; arguments other than plain columns and inner calls computed by with_column stages
    first); and the hidden column names. `output` (token, name): that call's result is named
    `name` instead of its token."""
    calls = calls_in(list(texts))
    for group in _levels(calls):
        cols = []
        for c in group:
            names = []
            for j, a in enumerate(c.arg_sql):
                d = _direct(c, j)
                if d is None:
                    d = f"{c.token}_a{j}"
                    node = n.WithColumn(node, d, a)
                names.append(d)
            cols.append(tuple(names))
        node = UdfEval(node, tuple(c.udf for c in group), tuple(c.token for c in group), tuple(cols),
                       tuple(c.display for c in group),
                       tuple(output[1] if output and output[0] == c.token else None for c in group))
    return node, [c.token for c in calls]


def _select_text(e: Any, hidden: list[str]) -> str:
    if isinstance(e, Column):
        return f"{e.sql} AS {quote_ident(e.name or e.display)}"
    s = str(e)
    if s.strip() == "*" and hidden:
        return "* EXCLUDE (" + ", ".join(quote_ident(h) for h in hidden) + ")"
    return s


def select(node: Any, exprs: tuple[Any, ...]) -> Any:
    texts = [e.sql if isinstance(e, Column) else str(e) for e in exprs]
    node, hidden = plan_udfs(node, texts)
    return n.Select(node, tuple(_select_text(e, hidden) for e in exprs))


def filter(node: Any, condition: Any) -> Any:  # noqa: A001 - the frame method's name
    """A UdfFilter node: kept whole until compiling, so the pushdown can place it like a filter
    (plan/udf_pushdown.py), then expanded by expand_filter."""
    if isinstance(condition, UdfCall) and not pa.types.is_boolean(condition.udf.return_type):
        raise AnalysisException(f"filter: {condition.display} returns {condition.udf.return_type}, not a boolean; "
                                "compare it (e.g. f(x) == 'a') or declare the UDF's return type 'boolean'")
    text = condition.sql if isinstance(condition, Column) else str(condition)
    return UdfFilter(node, text)


def expand_filter(node: Any) -> Any:
    """A UdfFilter as the nodes that run it: the UDFs' stages, the filter, the hidden columns dropped."""
    child, hidden = plan_udfs(node.child, [node.condition])
    return DropColumns(n.Filter(child, node.condition), tuple(hidden))


def with_column(node: Any, name: str, expr: Any) -> Any:
    if isinstance(expr, UdfCall):     # a bare call: its result is the column (no SQL stage)
        node, hidden = plan_udfs(node, [expr.sql], output=(expr.token, name))
        return DropColumns(node, tuple(h for h in hidden if h != expr.token))
    text = expr.sql if isinstance(expr, Column) else str(expr)
    node, hidden = plan_udfs(node, [text])
    return DropColumns(n.WithColumn(node, name, text), tuple(h for h in hidden if h != name))


def key_name(col: Column) -> str:
    """The column a group_by key expression is computed into (its alias, else Spark's name)."""
    return col.name or col.display

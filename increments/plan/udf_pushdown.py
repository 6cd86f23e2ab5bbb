"""A filter reading UDF results (UdfFilter) placed around with_watermark as Spark places it.

Spark's PushPredicateThroughNonJoin treats a Python UDF like any deterministic expression: the
conjuncts of a filter right above EventTimeWatermark that are deterministic and do not reference
the event-time column go below it (verified on Spark 4.3: tests/operators/test_udf_spark_parity.py,
a row a UDF filter drops never feeds the watermark). Here a conjunct goes below when it is
deterministic, does not reference the column itself, and every UDF it reads is deterministic and
gets arguments that (transitively, through nested UDFs) do not reference it. Plain filters between
the UDF filter and the watermark are stepped over (Spark's CombineFilters merged them). A
condition DuckDB cannot parse stays above, whole.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..sql_tree import conjuncts, deterministic, parse_where, references, walk, where_sql
from ..udf import _CALLS, _TOKEN
from . import nodes as n
from .udf_nodes import UdfFilter


def _tokens(e: dict) -> set[str]:
    out = set()
    for x in walk(e):
        if x.get("class") == "COLUMN_REF":
            for part in x.get("column_names") or []:
                m = _TOKEN.fullmatch(str(part))
                if m:
                    out.add(m.group(1))
    return out


def _udf_free_of(token: str, column: str, seen: set[str]) -> bool:
    if token in seen:
        return True
    call = _CALLS.get(token)
    if call is None or not call.udf.deterministic:
        return False
    seen.add(token)
    for arg in call.arg_sql:
        parsed = parse_where(arg)
        if parsed is None:
            return False
        e = parsed[1]
        if references(e, column) or not deterministic(e) or not all(_udf_free_of(t, column, seen) for t in _tokens(e)):
            return False
    return True


def split(condition: str, column: str) -> tuple[str | None, str | None]:
    """(the conjuncts that go below the watermark, the ones that stay), each as one SQL text or None."""
    parsed = parse_where(condition)
    if parsed is None:
        return None, condition
    tree, where = parsed
    conjs = conjuncts(where)
    down = [deterministic(c) and not references(c, column) and all(_udf_free_of(t, column, set()) for t in _tokens(c))
            for c in conjs]
    if all(down):
        return condition, None
    if not any(down):
        return None, condition
    texts = [where_sql(tree, c) for c in conjs]
    if any(t is None for t in texts):
        return None, condition

    def join(parts: list[str]) -> str:
        return " AND ".join(f"({p})" for p in parts)
    return join([t for t, d in zip(texts, down) if d]), join([t for t, d in zip(texts, down) if not d])


def push_udf_filter(node: UdfFilter, push: Callable[[n.Node], n.Node]) -> n.Node:
    child = push(node.child)
    plain: list[str] = []
    below: Any = child
    while isinstance(below, n.Filter):
        plain.insert(0, below.condition)
        below = below.child
    if not isinstance(below, n.WithWatermark):
        return dataclasses.replace(node, child=child)
    down, up = split(node.condition, below.column)
    if down is None:
        return dataclasses.replace(node, child=child)
    out: n.Node = dataclasses.replace(below, child=push(UdfFilter(below.child, down)))
    for c in plain:
        out = n.Filter(out, c)
    return UdfFilter(out, up) if up is not None else out

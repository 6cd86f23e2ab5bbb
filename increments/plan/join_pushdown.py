"""Plan rewrite: the parts of a join condition that Spark evaluates below the join.

Contract of `push_one_sided(compiler, node)`, for a join whose `on` is a SQL condition or a list of
key columns (any other `on` is returned unchanged; analyse() refuses it when the join is built):

- A side is *pushed to* when the join does not preserve it: inner and left semi both sides, left
  outer the right side, right outer the left side, full outer neither. This is Spark's
  PushPredicateThroughJoin for a join condition (Inner/LeftSemi: both; LeftOuter: right;
  RightOuter: left; FullOuter: none).
- Pushed into such a side, as one filter each (so each travels on its own):
  - every top-level conjunct of the condition that references that side only (decided by binding
    it in DuckDB against each side alone, join_condition.one_sided_terms), its alias removed;
  - `column IS NOT NULL` for every column of that side the condition compares (the operands of
    its null-intolerant comparisons, incl. BETWEEN's; for a column-list `on`, the key columns):
    Spark's InferFiltersFromConstraints adds these from the join's constraints, and the optimizer
    pushes them the same way.
  The filters then go below the side's with_watermark when they do not mention its event-time
  column (plan/pushdown.push_filters_below_watermarks), and from there into the file scan like any
  filter (plan/pushdown.pushable_conjuncts). As on Spark, the rows they remove are not counted in
  num_input_rows when the scan takes the filter, never feed the watermark and never reach the
  join's state. A filter that only mentions the other side or both sides stays in the condition.
- On a preserved side nothing is pushed; its one-sided conjuncts are returned as that side's
  pre-join filter instead (Spark's JoinConditionSplitPredicates for the streaming symmetric hash
  join: leftSideOnly / rightSideOnly): the operator neither stores nor joins a row failing it,
  and an outer join emits that row's NULL row at once. The conjuncts stay in the condition too.
- Stream-static joins get the same rewrite (the static side is pushed to like a stream side); their
  operator ignores the pre-join conjuncts and evaluates the whole condition in its one DuckDB join.

Nothing here refuses a query, and nothing is caught: a conjunct DuckDB cannot bind against one side
alone is not that side's (join_condition.binds turns the binding error into False), so it stays
in the condition, and the join's builder refuses a condition that does not type-check. Building the sides to learn their
schemas uses a fresh compiler of `compiler`'s class (the caller's operator ids and sources are
untouched); a side that cannot be built raises the same AnalysisException the join's own build
of that side would.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..operators.join_condition import Side, not_null_columns, one_sided_terms, unqualify
from ..sql import quote_ident
from . import nodes as n
from .pushdown import push_filters_below_watermarks

#: per join type, whether the left / right side is pushed to (not preserved by the join)
_PUSHED = {"left": ("inner", "right_outer", "left_semi"), "right": ("inner", "left_outer", "left_semi")}


def push_one_sided(compiler: Any, node: n.Join) -> tuple[n.Join, dict[str, list[str]]]:
    """(the join with the pushed filters below it, {"left": [...], "right": [...]} the pre-join
    conjuncts of each preserved side, as written in the condition); see the module doc."""
    none: dict[str, list[str]] = {"left": [], "right": []}
    if not isinstance(node.on, (str, list, tuple)):
        return node, none
    sides = {}
    for name, sub in (("left", node.left), ("right", node.right)):
        op = type(compiler)(check=False).build(push_filters_below_watermarks(sub))
        sides[name] = Side(op.schema, op.alias, {})
    terms = dict(zip(("left", "right"), one_sided_terms(node.on, sides["left"], sides["right"])))
    not_null = {"left": not_null_columns(node.on, sides["left"], sides["right"]),
                "right": not_null_columns(node.on, sides["right"], sides["left"])}
    push = {side: node.how in hows for side, hows in _PUSHED.items()}
    out = {}
    for name, sub in (("left", node.left), ("right", node.right)):
        todo = ([unqualify(t, sides[name]) for t in terms[name]]
                + [f"{quote_ident(c)} IS NOT NULL" for c in not_null[name]]) if push[name] else []
        out[name] = _with_filters(sub, todo) if todo else sub
    return (dataclasses.replace(node, left=out["left"], right=out["right"]),
            {side: [] if push[side] else terms[side] for side in ("left", "right")})


def _with_filters(sub: n.Node, terms: list[str]) -> n.Node:
    """`sub` with one filter per term (under its alias, if it is aliased), pushed below watermarks."""
    alias = sub.name if isinstance(sub, n.Alias) else None
    body = sub.child if alias else sub
    for t in terms:
        body = n.Filter(body, t)
    body = push_filters_below_watermarks(body)
    return n.Alias(body, alias) if alias else body

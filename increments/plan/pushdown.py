"""Filter pushdown as Spark does it: below the watermark node, and into the file scan.

`push_filters_below_watermarks(node)`: the filters right above a with_watermark node are split at
their top-level ANDs, as Spark's PushPredicateThroughNonJoin splits a Filter over an
EventTimeWatermark (after CombineFilters merged a chain of them): the deterministic conjuncts that
do not reference the event-time column move below it, so the rows they remove never feed the max
event time (SEMANTICS.md rule 3); the others stay above. "References" is decided on DuckDB's parse
tree (a column reference named so, bare or qualified), never on the text: a string literal that
spells the column's name is no reference. Verified batch by batch against Spark 4.3
(tests/operators/test_filter_split_spark_parity.py). Compiler.compile applies it to the whole plan;
plan/join_pushdown.py to the filters it puts below a join.

Which filter conjuncts Spark would push into a file scan, so num_input_rows can match it:

Spark pushes simple predicates on data columns into the JSON and CSV readers (JsonFilters /
CSVFilters: comparisons of a column with a literal, IS [NOT] NULL, IN, LIKE prefix/suffix/contains,
AND/OR/NOT of those); rows failing them are never produced by the scan, so its numInputRows
excludes them (SEMANTICS.md rule 3, verified on Spark 4.3: `campaign_id != 'c0'` is excluded,
`upper(campaign_id) != 'C0'` and `n % 2 = 0` are not). Parquet scans count every row of the row
groups they read, so nothing is pushed for them here.

`pushable_conjuncts(condition)` splits the condition at its top-level ANDs (parsed by DuckDB's own
SQL parser) and returns the SQL text of the conjuncts Spark would push.
"""
from __future__ import annotations

import dataclasses

from ..sql_tree import bare_name, conjuncts, deterministic, parse_select, parse_where, references, walk, where_sql
from . import nodes as n
from .udf_pushdown import push_udf_filter
from .udf_nodes import UdfFilter

_COMPARE = {"COMPARE_EQUAL", "COMPARE_NOTEQUAL", "COMPARE_LESSTHAN", "COMPARE_GREATERTHAN",
            "COMPARE_LESSTHANOREQUALTO", "COMPARE_GREATERTHANOREQUALTO", "COMPARE_NOT_DISTINCT_FROM"}
_LIKE = {"~~", "like_escape", "prefix", "suffix", "contains", "starts_with", "ends_with"}


def _is_col(e: dict) -> bool:
    """A top-level column: Spark pushes no predicate on a nested field (`e.user.id`) into a JSON
    or CSV scan (nested predicate pushdown is for Parquet/ORC only)."""
    return e.get("class") == "COLUMN_REF" and len(e.get("column_names") or ()) == 1


def _is_lit(e: dict) -> bool:
    return e.get("class") == "CONSTANT" or (e.get("class") == "CAST" and _is_lit(e.get("child") or {}))


def _pushable(e: dict) -> bool:
    cls, typ = e.get("class"), e.get("type")
    if cls == "COMPARISON" and typ in _COMPARE:
        l, r = e["left"], e["right"]
        return (_is_col(l) and _is_lit(r)) or (_is_lit(l) and _is_col(r))
    if cls == "CONJUNCTION":
        return all(_pushable(c) for c in e["children"])
    if cls == "OPERATOR":
        kids = e.get("children") or []
        if typ == "OPERATOR_NOT":
            return len(kids) == 1 and _pushable(kids[0])
        if typ in ("OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"):
            return len(kids) == 1 and _is_col(kids[0])
        if typ in ("COMPARE_IN", "COMPARE_NOT_IN"):
            return bool(kids) and _is_col(kids[0]) and all(_is_lit(k) for k in kids[1:])
    if cls == "FUNCTION" and e.get("function_name") in _LIKE:
        kids = [a.get("expression", a) for a in (e.get("arguments") or e.get("children") or [])]
        if len(kids) != 2 or not _is_col(kids[0]) or kids[1].get("class") != "CONSTANT":
            return False
        if e["function_name"] != "~~":
            return True
        pattern = str((kids[1].get("literal") or {}).get("text", "_"))
        inner = pattern.strip("%")
        return "%" not in inner and "_" not in inner and "\\" not in inner   # prefix%, %suffix, %contains%
    return False


def pushable_conjuncts(condition: str) -> list[str]:
    parsed = parse_where(condition)
    if parsed is None:          # DuckDB cannot parse it: nothing is pushed
        return []
    tree, where = parsed
    return [sql for conj in conjuncts(where) if _pushable(conj) and (sql := where_sql(tree, conj)) is not None]


def split_around_watermark(condition: str, column: str) -> tuple[list[str], list[str]]:
    """(conjuncts that go below the watermark, conjuncts that stay above) of `condition`, split at
    its top-level ANDs as Spark's PushPredicateThroughNonJoin splits a Filter over an
    EventTimeWatermark: deterministic conjuncts that do not reference the event-time `column` go
    below. A condition kept whole on one side keeps its own text; one DuckDB cannot parse stays
    above, whole (the safe side: every row feeds the max event time, as before the split)."""
    parsed = parse_where(condition)
    if parsed is None:
        return [], [condition]
    tree, where = parsed
    conjs = conjuncts(where)
    goes_down = [deterministic(c) and not references(c, column) for c in conjs]
    if not any(goes_down):
        return [], [condition]
    if all(goes_down):
        return [condition], []
    texts = [where_sql(tree, c) for c in conjs]
    if any(t is None for t in texts):
        return [], [condition]
    return ([t for t, d in zip(texts, goes_down) if d], [t for t, d in zip(texts, goes_down) if not d])


def _over_watermark(node: n.Node) -> bool:
    """Whether `node` is a run of select/with_column nodes right above a with_watermark."""
    while isinstance(node, (n.Select, n.WithColumn)):
        node = node.child
    return isinstance(node, n.WithWatermark)


def _column_roots(e: dict) -> list[str] | None:
    """The columns the parsed expression reads (lower case), or None when one is qualified or a
    struct field (`a.b`): too ambiguous to push through a projection."""
    out = []
    for x in walk(e):
        if x.get("class") == "COLUMN_REF":
            names = x.get("column_names") or []
            if len(names) != 1:
                return None
            out.append(str(names[0]).lower())
    return out


def _passthrough(node: n.Node) -> set[str] | None:
    """The columns a deterministic select/with_column passes on unchanged (lower case), or None
    when it is not deterministic (Spark pushes a filter only through a deterministic Project)."""
    if isinstance(node, n.WithColumn):
        parsed = parse_where(node.expr)
        if parsed is None or not deterministic(parsed[1]):
            return None
        return _AllBut({node.name.lower()})
    assert isinstance(node, n.Select)
    out: set[str] = set()
    for e in node.exprs:
        name = bare_name(e)
        if name is not None:                # a column passed on under its own name
            out.add(name.lower())
            continue
        items = parse_select(e)
        if items is None or not deterministic(items):
            return None
    return out


class _AllBut(set):
    """Every column but these (a with_column passes on all of its input's others)."""

    def __contains__(self, name: object) -> bool:
        return not set.__contains__(self, name)


def split_through_projection(condition: str, node: n.Node) -> tuple[list[str], list[str]]:
    """(conjuncts that go below the select/with_column `node`, those that stay above) of
    `condition`: as Spark pushes a filter through a deterministic Project, a deterministic
    conjunct that reads only columns the node passes on unchanged goes below it (on its way to a
    watermark below: push_filters_below_watermarks). A conjunct reading a computed column stays
    above (Spark would substitute its expression; not done here)."""
    passthrough = _passthrough(node)
    parsed = parse_where(condition) if passthrough is not None else None
    if parsed is None:
        return [], [condition]
    tree, where = parsed
    conjs = conjuncts(where)

    def goes(c: dict) -> bool:
        roots = _column_roots(c)
        return deterministic(c) and roots is not None and all(r in passthrough for r in roots)
    goes_down = [goes(c) for c in conjs]
    if not any(goes_down):
        return [], [condition]
    if all(goes_down):
        return [condition], []
    texts = [where_sql(tree, c) for c in conjs]
    if any(t is None for t in texts):
        return [], [condition]
    return ([t for t, d in zip(texts, goes_down) if d], [t for t, d in zip(texts, goes_down) if not d])


def push_filters_below_watermarks(node: n.Node) -> n.Node:
    """`node` with the filters right above each with_watermark split around it (split_around_watermark),
    also through deterministic select/with_column nodes between them (split_through_projection):
    a chain of filters is combined first (Spark's CombineFilters), so every conjunct of every filter
    of the chain is placed; the conjuncts that go below keep their order, below the watermark, as
    do the others above it. A filter reading UDF results is placed alike (plan/udf_pushdown.py).
    The other nodes are rebuilt unchanged."""
    if isinstance(node, UdfFilter):
        return push_udf_filter(node, push_filters_below_watermarks)
    if isinstance(node, n.Filter):
        conds: list[str] = []
        below: n.Node = node
        while isinstance(below, n.Filter):
            conds.insert(0, below.condition)          # innermost first
            below = below.child
        child = push_filters_below_watermarks(below)
        if isinstance(child, (n.Select, n.WithColumn)) and _over_watermark(child):
            down, up = [], []
            for c in conds:
                d, u = split_through_projection(c, child)
                down += d
                up += u
            if down:
                inner = child.child
                for c in down:
                    inner = n.Filter(inner, c)
                child = dataclasses.replace(child, child=push_filters_below_watermarks(inner))
            conds = up
        if isinstance(child, n.WithWatermark):
            down: list[str] = []
            up: list[str] = []
            for c in conds:
                d, u = split_around_watermark(c, child.column)
                down += d
                up += u
            if down:
                inner: n.Node = child.child
                for c in down:
                    inner = n.Filter(inner, c)
                child = dataclasses.replace(child, child=push_filters_below_watermarks(inner))
            conds = up
        for c in conds:
            child = n.Filter(child, c)
        return child
    if isinstance(node, n.Unary):
        return dataclasses.replace(node, child=push_filters_below_watermarks(node.child))
    if isinstance(node, (n.Join, n.Union)):
        return dataclasses.replace(node, left=push_filters_below_watermarks(node.left),
                                   right=push_filters_below_watermarks(node.right))
    return node


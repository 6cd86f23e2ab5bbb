"""Filter pushdown as Spark does it: below the watermark node, and into the file scan.

`push_filters_below_watermarks(node)`: a filter that does not mention the watermark's event-time
column moves below that with_watermark node (Spark's PushPredicateThroughNonJoin over
EventTimeWatermark), so the rows it removes never feed the max event time (SEMANTICS.md rule 3).
Compiler.compile applies it to the whole plan; plan/join_pushdown.py to the filters it puts below
a join.

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

import copy
import dataclasses
import json
import re
from typing import Any

import duckdb

from ..sql import duckdb_connection
from . import nodes as n

_COMPARE = {"COMPARE_EQUAL", "COMPARE_NOTEQUAL", "COMPARE_LESSTHAN", "COMPARE_GREATERTHAN",
            "COMPARE_LESSTHANOREQUALTO", "COMPARE_GREATERTHANOREQUALTO", "COMPARE_NOT_DISTINCT_FROM"}
_LIKE = {"~~", "like_escape", "prefix", "suffix", "contains", "starts_with", "ends_with"}


def _is_col(e: dict) -> bool:
    return e.get("class") == "COLUMN_REF"


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


def _conjuncts(e: dict) -> list[dict]:
    if e.get("class") == "CONJUNCTION" and e.get("type") == "CONJUNCTION_AND":
        return [c for k in e["children"] for c in _conjuncts(k)]
    return [e]


def pushable_conjuncts(condition: str) -> list[str]:
    con = duckdb_connection()
    prefix = "SELECT * FROM __t WHERE "
    try:
        tree: dict[str, Any] = json.loads(con.execute("SELECT json_serialize_sql(?)", [prefix + condition]).fetchall()[0][0])
        if tree.get("error"):
            return []
        where = tree["statements"][0]["node"]["where_clause"]
    except (duckdb.Error, KeyError, IndexError, TypeError, ValueError):
        # DuckDB cannot parse/serialize it, or the tree is not a SELECT ... WHERE: not pushed
        return []
    out = []
    for conj in _conjuncts(where):
        if not _pushable(conj):
            continue
        one = copy.deepcopy(tree)
        one["statements"][0]["node"]["where_clause"] = conj
        sql = con.execute("SELECT json_deserialize_sql(?::JSON)", [json.dumps(one)]).fetchall()[0][0]
        idx = sql.upper().find(" WHERE ")
        if idx >= 0:
            out.append(sql[idx + len(" WHERE "):].rstrip(";"))
    return out


def _mentions(expr: str, column: str) -> bool:
    return re.search(r'(?<![\w."])"?' + re.escape(column) + r'"?(?![\w"])', expr) is not None


def push_filters_below_watermarks(node: n.Node) -> n.Node:
    """`node` with every filter that does not mention a with_watermark's column moved below it
    (module doc); the other nodes are rebuilt unchanged."""
    if isinstance(node, n.Filter):
        child = push_filters_below_watermarks(node.child)
        if isinstance(child, n.WithWatermark) and not _mentions(node.condition, child.column):
            return dataclasses.replace(child, child=push_filters_below_watermarks(n.Filter(child.child, node.condition)))
        return n.Filter(child, node.condition)
    if isinstance(node, n.Unary):
        return dataclasses.replace(node, child=push_filters_below_watermarks(node.child))
    if isinstance(node, (n.Join, n.Union)):
        return dataclasses.replace(node, left=push_filters_below_watermarks(node.left),
                                   right=push_filters_below_watermarks(node.right))
    return node

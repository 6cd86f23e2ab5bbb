"""A join's output columns, and the `alias.column` references the SQL after a join makes to them.

Contract:
- Output columns: the left side's then the right side's; a column-list `on` puts the key columns
  first (one copy, as Spark's USING join: left's for inner/left outer, right's for right outer,
  coalesced for full outer); left semi outputs the left side's columns only. Names that occur on
  both sides are qualified with the side's alias ("i.ad_id"); without aliases that is an error.
- `qualify_sql()` lets the SQL stages after a join (or after `alias`) reference `alias.column`:
  such references are rewritten to the join output's column names (compiler._sql calls it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import sql_tree
from ..errors import AnalysisException
from ..sql import quote_ident

if TYPE_CHECKING:
    from .join_condition import Side


def output_columns(how: str, left: Side, right: Side, left_alias: str, right_alias: str,
                   keys: list[str] | None) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict[str, dict[str, str]]]:
    """(the join's output expressions, the left side's alone (left semi), the qualifiers): the
    expressions are over the sides' aliases `left_alias` / `right_alias` (unquoted); `keys` are a
    column-list `on`'s columns."""
    la, ra = quote_ident(left_alias), quote_ident(right_alias)
    keys = keys or []
    lcols = [c for c in left.schema.names if c not in keys]
    rcols = [c for c in right.schema.names if c not in keys]
    both = set(lcols) & set(rcols)
    if how == "left_semi":
        both = set()
    if both and not (left.alias and right.alias):
        raise AnalysisException(f"join: both sides have column(s) {sorted(both)}: alias the sides "
                                "(left.alias(\"l\").join(right.alias(\"r\"), ...)) so the output can name them "
                                "\"l.col\" / \"r.col\", or rename them with select before the join")
    quals: dict[str, dict[str, str]] = {}
    out: list[tuple[str, str]] = []
    for k in keys:
        if how == "right_outer":
            e = f"{ra}.{quote_ident(k)}"
        elif how == "full_outer":
            e = f"coalesce({la}.{quote_ident(k)}, {ra}.{quote_ident(k)})"
        else:
            e = f"{la}.{quote_ident(k)}"
        out.append((e, k))
        for side in (left, right):
            if side.alias:
                quals.setdefault(side.alias, {})[k] = k
    left_out = [(f"{la}.{quote_ident(c)}", c) for c in left.schema.names]
    for side, cols, ref in ((left, lcols, la), (right, rcols, ra)):
        if side is right and how == "left_semi":
            break
        for c in cols:
            name = f"{side.alias}.{c}" if c in both else c
            out.append((f"{ref}.{quote_ident(c)}", name))
            if side.alias:
                quals.setdefault(side.alias, {})[c] = name
    return (left_out if how == "left_semi" else out), left_out, quals


def select_list(exprs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{e} AS {quote_ident(n)}" for e, n in exprs)


# -- qualified references in the SQL after a join ----------------------------------------------------
def _dot(tok: sql_tree.Token) -> bool:
    return tok.op(".")


def qualify_sql(expr: str, quals: dict[str, dict[str, str]], as_select: bool = False) -> str:
    """Rewrite `alias.col` references to the join output's column name; a reference is read from
    DuckDB's tokens (an unquoted alias, a dot, a name), so a string literal, a quoted name or a
    comment that spells one is left alone. In a select list, a bare `alias.col` becomes
    `"<output name>" AS "col"` and `alias.*` that side's columns."""
    if not quals:
        return expr
    toks = [t for t in sql_tree.tokens(expr) if t.kind != "comment"]
    if (as_select and len(toks) == 3 and toks[0].kind in ("identifier", "keyword") and toks[0].text in quals
            and _dot(toks[1])):
        alias = toks[0].text
        if toks[2].op("*"):
            return ", ".join(f"{quote_ident(o)} AS {quote_ident(c)}" for c, o in quals[alias].items())
        col = toks[2].name
        if col is not None:
            return f"{quote_ident(quals[alias][col])} AS {quote_ident(col)}" if col in quals[alias] else expr
    out, pos, i = [], 0, 0
    while i + 2 < len(toks):
        a, dot, c = toks[i:i + 3]
        col = c.name
        if (a.kind in ("identifier", "keyword") and a.text in quals and _dot(dot) and col in quals[a.text]
                and not (i and _dot(toks[i - 1]))):          # not a field of something before it
            out += [expr[pos:a.start], quote_ident(quals[a.text][col])]
            pos, i = c.end, i + 3
            continue
        i += 1
    return "".join(out) + expr[pos:]

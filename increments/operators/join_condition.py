"""Join conditions: what a join's `on` means, worked out once at compile time.

Contract:
- `on` is a list of column names (both sides have them; output keeps one copy, first) or a DuckDB
  SQL condition over the two sides, whose columns are referenced plainly (when unambiguous) or
  qualified by the sides' aliases (`i.ad_id`). The condition is evaluated as written by DuckDB.
- `analyse()` splits the condition into top-level conjuncts and finds (a) equality keys: a
  conjunct `A = B` where A binds to the left side only and B to the right only (or vice versa);
  (b) event-time bounds: comparisons (or BETWEEN) between an expression of the left side's
  watermarked column and one of the right side's, of the form `column + constant interval`.
  What the conjuncts, comparisons and operands are is read from DuckDB's parse tree
  (increments/sql_tree.py); their text is the user's, cut out of the condition where the tree
  says (a key's text is recorded in the checkpoint's state schema and evaluated as written, so a
  new parser must cut it exactly there). A condition DuckDB cannot parse is refused, naming why.
  Which side an expression belongs to is decided by binding it in DuckDB against each side alone;
  the constant of a bound is measured by evaluating the expression at two probe instants.
- State watermarks (Spark's StreamingJoinHelper): a bound `L.t >= R.t + d` means future right rows
  (event time > W) only match left rows with `L.t > W + d`, so left rows with
  `L.t <= W + d` are evictable; Spark subtracts 1 ms more for inclusive bounds (`>=`, `<=`,
  BETWEEN), which we copy. Several bounds on one side: the largest offset wins.
- The output columns and the `alias.column` references after a join: join_outputs.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .. import sql_tree
from ..errors import AnalysisException
from ..sql import quote_ident, run_sql
from .join_outputs import output_columns, qualify_sql

LEFT_DEFAULT, RIGHT_DEFAULT = "__l", "__r"
_PROBE_US = 1_000_000_000_000_000  # 2001-09-09, a probe instant (µs)
_DAY_US = 86_400_000_000


@dataclass
class Side:
    schema: pa.Schema
    alias: str | None
    watermarked: dict[str, Any]      # event-time column -> (watermark id, delay ms)

    @property
    def ref(self) -> str:
        return self.alias or ""


@dataclass
class JoinSpec:
    condition: str                       # full SQL condition over aliases la / ra
    left_alias: str
    right_alias: str
    left_keys: list[str]                 # SQL expressions over the left side alone
    right_keys: list[str]
    out_exprs: list[tuple[str, str]]     # (SQL over la/ra, output name)
    left_out: list[tuple[str, str]]      # left columns only (left semi)
    qualifiers: dict[str, dict[str, str]] = field(default_factory=dict)
    #: state watermark offsets: side -> (time column, offset ms); evict rows with t <= W + offset
    state_offsets: dict[str, tuple[str, int]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # why state cannot be bounded
    other_terms: list[str] = field(default_factory=list)  # top-level conjuncts that are not equality keys
    using: bool = False                  # a column-list `on` (keys are bare quoted column names)

    @property
    def null_safe_condition(self) -> str:
        """The condition with its equality keys compared null-safely: Spark's stream-stream join state
        matches a NULL key with a NULL key (only visible where no side filters NULL keys: full outer)."""
        if not self.left_keys:
            return self.condition
        if self.using:
            la, ra = quote_ident(self.left_alias), quote_ident(self.right_alias)
            return " AND ".join(f"{la}.{k} IS NOT DISTINCT FROM {ra}.{k}" for k in self.left_keys)
        parts = [f"(({a}) IS NOT DISTINCT FROM ({b}))" for a, b in zip(self.left_keys, self.right_keys)]
        return " AND ".join(parts + [f"({t})" for t in self.other_terms])


# -- the condition's parts, as DuckDB parses them (increments/sql_tree.py) -------------------------
#: comparison node type -> (the operator's spellings, its canonical spelling)
_CMP_TYPES = {"COMPARE_EQUAL": (("=", "=="), "="), "COMPARE_NOTEQUAL": (("<>", "!="), "<>"),
              "COMPARE_LESSTHAN": (("<",), "<"), "COMPARE_GREATERTHAN": ((">",), ">"),
              "COMPARE_LESSTHANOREQUALTO": (("<=",), "<="), "COMPARE_GREATERTHANOREQUALTO": ((">=",), ">=")}


@dataclass(frozen=True)
class Term:
    """A top-level conjunct of a condition: its text as written (outer parentheses removed) and its tree."""
    text: str
    tree: dict


def _is_and(tok: sql_tree.Token) -> bool:
    return tok.word("AND")


def terms(cond: str) -> list[Term] | None:
    """The top-level AND terms of `cond` (nested ANDs flattened; a top-level OR keeps the whole
    condition one term), or None when DuckDB cannot parse it."""
    parsed = sql_tree.parse_where(cond)
    if parsed is None:
        return None
    return _terms(sql_tree.strip_parens(cond.strip()), parsed[1])


def _terms(text: str, tree: dict) -> list[Term]:
    if sql_tree.is_and(tree):
        pieces = sql_tree.part_texts(text, tree["children"], _is_and)
        if pieces is not None:
            return [t for piece, kid in zip(pieces, tree["children"]) for t in _terms(sql_tree.strip_parens(piece), kid)]
    return [Term(text, tree)]


def split_conjuncts(cond: str) -> list[str]:
    """Top-level AND terms as text (BETWEEN's AND is no conjunction); a top-level OR makes the
    whole condition one term. A condition DuckDB cannot parse is one term."""
    found = terms(cond)
    return [t.text for t in found] if found is not None else [cond]


def _comparisons(term: Term) -> list[tuple[str, str, str, dict, dict]]:
    """A conjunct as comparisons (a, op, b, a's tree, b's tree), a and b as written: BETWEEN gives
    two (>= the lower bound, <= the upper); =, <>, <, >, <=, >= one; other shapes none."""
    e = term.tree
    if e.get("class") == "COMPARISON" and e.get("type") in _CMP_TYPES:
        spellings, op = _CMP_TYPES[e["type"]]
        parts = sql_tree.part_texts(term.text, [e["left"], e["right"]],
                                    lambda t: t.op(*spellings))
        return [(parts[0], op, parts[1], e["left"], e["right"])] if parts else []
    if e.get("class") == "BETWEEN":
        parts = sql_tree.part_texts(term.text, [e["input"], e["lower"], e["upper"]],
                                    [lambda t: t.word("BETWEEN"), _is_and])
        if not parts:
            return []
        x, lo, hi = parts
        return [(x, ">=", lo, e["input"], e["lower"]), (x, "<=", hi, e["input"], e["upper"])]
    return []


# -- binding and probing in DuckDB ------------------------------------------------------------
def _from(side: Side, table: str = "__e") -> str:
    return f"{table} AS {quote_ident(side.alias)}" if side.alias else table


def binds(expr: str, side: Side) -> bool:
    try:
        run_sql(f"SELECT ({expr}) AS v FROM {_from(side)}", {"__e": side.schema.empty_table()})
        return True
    except Exception:
        return False


def _time_offset_ms(expr: str, side: Side) -> tuple[str, int] | None:
    """(column, d) when expr == <the side's watermarked column> + d for two probe instants."""
    for col in side.watermarked:
        vals = []
        for t in (_PROBE_US, _PROBE_US + _DAY_US):
            arrays = [pa.nulls(1, f.type) for f in side.schema]
            i = side.schema.get_field_index(col)
            arrays[i] = pa.array([t], pa.int64()).cast(side.schema.field(i).type)
            table = pa.Table.from_arrays(arrays, schema=side.schema)
            try:
                out = run_sql(f"SELECT epoch_us(CAST(({expr}) AS TIMESTAMPTZ)) AS v FROM {_from(side)}", {"__e": table})
            except Exception:
                return None
            v = out.column(0)[0].as_py()
            if v is None:
                break
            vals.append(v - t)
        if len(vals) == 2 and vals[0] == vals[1]:
            return col, vals[0] // 1000
    return None


def _side_of(expr: str, left: Side, right: Side) -> str | None:
    lb, rb = binds(expr, left), binds(expr, right)
    if lb and not rb:
        return "left"
    if rb and not lb:
        return "right"
    return None


# -- the analysis -------------------------------------------------------------------------------
def analyse(on: Any, how: str, left: Side, right: Side, require_equality: bool = True) -> JoinSpec:
    la = left.alias or LEFT_DEFAULT
    ra = right.alias or RIGHT_DEFAULT
    if left.alias and left.alias == right.alias:
        raise AnalysisException(f"join: both sides are aliased {left.alias!r}; give them different aliases")
    if isinstance(on, (list, tuple)):
        return _analyse_columns(list(on), how, left, right, la, ra)
    if not isinstance(on, str) or not on.strip():
        raise AnalysisException(f"join: on={on!r}: give a list of column names or a SQL condition")
    found = terms(on)
    if found is None:
        raise AnalysisException(f"join: the condition {on!r} is not SQL DuckDB can parse ({sql_tree.parse_error(on)}); "
                                "write it as a DuckDB SQL condition, e.g. \"l.ad_id = r.ad_id\"")
    spec = JoinSpec(on, la, ra, [], [], [], [])
    for term in found:
        is_key = False
        for a, op, b, _ta, _tb in _comparisons(term):
            sa, sb = _side_of(a, left, right), _side_of(b, left, right)
            if sa is None or sb is None or sa == sb:
                continue
            if sa == "right":
                a, b, sa, sb = b, a, sb, sa
                op = {">": "<", "<": ">", ">=": "<=", "<=": ">="}.get(op, op)
            if op == "=":
                spec.left_keys.append(a)
                spec.right_keys.append(b)
                is_key = True
                continue
            _add_bound(spec, a, op, b, left, right)
        if not is_key:
            spec.other_terms.append(term.text)
    _key_watermarks(spec, left, right)
    if not spec.left_keys and require_equality:
        raise AnalysisException(f"join: the condition {on!r} has no equality between a left and a right column "
                                "(e.g. \"l.ad_id = r.ad_id\"); a streaming join needs one")
    spec.out_exprs, spec.left_out, spec.qualifiers = output_columns(how, left, right, la, ra, keys=None)
    return spec


def _add_bound(spec: JoinSpec, a: str, op: str, b: str, left: Side, right: Side) -> None:
    """a (left) op b (right), both `time column + constant`: record the state watermarks."""
    ta, tb = _time_offset_ms(a, left), _time_offset_ms(b, right)
    if ta is None or tb is None:
        return
    d = tb[1] - ta[1]          # left.t  op  right.t + d
    inclusive = op in (">=", "<=", "=")
    adj = -1 if inclusive else 0
    if op in (">", ">=", "="):     # left lower bound: evict left rows with t <= W + d
        _offset(spec, "left", ta[0], d + adj)
    if op in ("<", "<=", "="):     # right.t >= left.t - d: evict right rows with t <= W - d
        _offset(spec, "right", tb[0], -d + adj)


def _key_column(key: str) -> str | None:
    """The column a key expression names when it is one column reference (`l.window`, `"ad_id"`)."""
    parsed = sql_tree.parse_where(key)
    if parsed is None or parsed[1].get("class") != "COLUMN_REF":
        return None
    names = parsed[1].get("column_names") or []
    return str(names[-1]) if 1 <= len(names) <= 2 else None


def _key_watermarks(spec: JoinSpec, left: Side, right: Side) -> None:
    """A watermarked column among the equality keys of both sides (e.g. the `window` of two windowed
    aggregations): Spark's key state watermark. Rows (keys) with event time <= W are evicted (offset
    0; a window's event time is its end), and it takes precedence over a bound's."""
    for a, b in zip(spec.left_keys, spec.right_keys):
        ca, cb = _key_column(a), _key_column(b)
        if ca in left.watermarked and cb in right.watermarked:
            spec.state_offsets["left"] = (ca, 0)
            spec.state_offsets["right"] = (cb, 0)
            return


def event_time_us_sql(col: str, schema: pa.Schema) -> str:
    """SQL for a column's event time in µs: a window struct's is its end (Spark: window.end)."""
    ref = quote_ident(col)
    if pa.types.is_struct(schema.field(col).type):
        ref = f"struct_extract({ref}, 'end')"
    return f"epoch_us({ref})"


def _offset(spec: JoinSpec, side: str, col: str, off: int) -> None:
    cur = spec.state_offsets.get(side)
    if cur is None or off > cur[1]:
        spec.state_offsets[side] = (col, off)


def _analyse_columns(cols: list[str], how: str, left: Side, right: Side, la: str, ra: str) -> JoinSpec:
    for c in cols:
        for side, name in ((left, "left"), (right, "right")):
            if c not in side.schema.names:
                raise AnalysisException(f"join: key column {c!r} is not on the {name} side (columns: {side.schema.names})")
    cond = " AND ".join(f"{quote_ident(la)}.{quote_ident(c)} = {quote_ident(ra)}.{quote_ident(c)}" for c in cols)
    spec = JoinSpec(cond, la, ra, [quote_ident(c) for c in cols], [quote_ident(c) for c in cols], [], [], using=True)
    _key_watermarks(spec, left, right)
    spec.out_exprs, spec.left_out, spec.qualifiers = output_columns(how, left, right, la, ra, keys=cols)
    return spec


def one_sided_terms(on: Any, left: Side, right: Side) -> tuple[list[str], list[str]]:
    """The top-level conjuncts of a SQL `on` that reference the left side only / the right side only
    (Spark pushes these below the join, or uses them as the join's pre-join filter)."""
    if not isinstance(on, str):
        return [], []
    lt: list[str] = []
    rt: list[str] = []
    for term in terms(on) or []:
        side = _side_of(term.text, left, right)
        if side == "left":
            lt.append(term.text)
        elif side == "right":
            rt.append(term.text)
    return lt, rt


def _compared(e: dict) -> list[dict]:
    """The operands of a comparison conjunct (=, <>, <, >, <=, >=, BETWEEN), else none."""
    if e.get("class") == "COMPARISON" and e.get("type") in _CMP_TYPES:
        return [e["left"], e["right"]]
    if e.get("class") == "BETWEEN":
        return [e["input"], e["lower"], e["upper"]]
    return []


def not_null_columns(on: Any, side: Side, other: Side) -> list[str]:
    """Columns of `side` that Spark's InferFiltersFromConstraints adds `IS NOT NULL` filters for:
    the columns referenced by the condition's comparisons (equality keys, time bounds, other
    comparisons), or the key columns of a column-list `on`. A reference is read from the parsed
    condition (`alias.column` or a bare column that only this side has), never from its text."""
    if isinstance(on, (list, tuple)):
        return [c for c in on if c in side.schema.names]
    if not isinstance(on, str):
        return []
    out: list[str] = []
    for term in terms(on) or []:
        for operand in _compared(term.tree):
            for names in sql_tree.column_refs(operand):
                q, c = (names[0], names[1]) if len(names) >= 2 else (None, names[0])
                if c not in side.schema.names:
                    continue
                if q is not None and q != side.alias:
                    continue
                if q is None and (c in other.schema.names or (side.alias and other.alias is None)):
                    continue
                if c not in out:
                    out.append(c)
    return out


def unqualify(term: str, side: Side) -> str:
    """A one-sided conjunct with the side's alias removed, to run as a filter on that side alone."""
    if not side.alias:
        return term
    return qualify_sql(term, {side.alias: {c: c for c in side.schema.names}})

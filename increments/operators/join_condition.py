"""Join conditions: what a join's `on` means, worked out once at compile time.

Contract:
- `on` is a list of column names (both sides have them; output keeps one copy, first) or a DuckDB
  SQL condition over the two sides, whose columns are referenced plainly (when unambiguous) or
  qualified by the sides' aliases (`i.ad_id`). The condition is evaluated as written by DuckDB.
- `analyse()` splits the condition into top-level conjuncts and finds (a) equality keys: a
  conjunct `A = B` where A binds to the left side only and B to the right only (or vice versa);
  (b) event-time bounds: comparisons (or BETWEEN) between an expression of the left side's
  watermarked column and one of the right side's, of the form `column + constant interval`.
  Which side an expression belongs to is decided by binding it in DuckDB against each side alone;
  the constant of a bound is measured by evaluating the expression at two probe instants.
- State watermarks (Spark's StreamingJoinHelper): a bound `L.t >= R.t + d` means future right rows
  (event time > W) only match left rows with `L.t > W + d`, so left rows with
  `L.t <= W + d` are evictable; Spark subtracts 1 ms more for inclusive bounds (`>=`, `<=`,
  BETWEEN), which we copy. Several bounds on one side: the largest offset wins.
- Output columns: the left side's then the right side's; a column-list `on` puts the key columns
  first (one copy, as Spark's USING join: left's for inner/left outer, right's for right outer,
  coalesced for full outer); left semi outputs the left side's columns only. Names that occur on
  both sides are qualified with the side's alias ("i.ad_id"); without aliases that is an error.
- `qualify_sql()` lets the SQL stages after a join (or after `alias`) reference `alias.column`:
  such references are rewritten to the join output's column names (compiler._sql calls it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..errors import AnalysisException
from ..sql import quote_ident, run_sql

LEFT_DEFAULT, RIGHT_DEFAULT = "__l", "__r"
_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_CMP = (">=", "<=", "<>", "!=", "==", "=", ">", "<")
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


# -- text helpers ---------------------------------------------------------------------------
def _skip_quote(text: str, i: int) -> int:
    q = text[i]
    i += 1
    while i < len(text):
        if text[i] == q:
            if i + 1 < len(text) and text[i + 1] == q:
                i += 2
                continue
            return i + 1
        i += 1
    return i


def _top_level_tokens(text: str):
    """Yield (position, token) for words and comparison operators at paren depth 0, outside quotes."""
    depth, i = 0, 0
    while i < len(text):
        ch = text[i]
        if ch in "'\"":
            i = _skip_quote(text, i)
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:
            m = _WORD.match(text, i)
            if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_.")):
                yield i, m.group(0).upper()
                i = m.end()
                continue
            if m:
                i = m.end()
                continue
            for op in _CMP:
                if text.startswith(op, i):
                    yield i, op
                    i += len(op)
                    break
            else:
                i += 1
            continue
        i += 1


def _strip_parens(text: str) -> str:
    t = text.strip()
    while t.startswith("(") and t.endswith(")"):
        depth = 0
        for i, ch in enumerate(t):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(t) - 1:
                return t
        t = t[1:-1].strip()
    return t


def split_conjuncts(cond: str) -> list[str]:
    """Top-level AND terms (BETWEEN's AND excluded); a top-level OR makes the whole one term."""
    cond = _strip_parens(cond)
    parts, start, between = [], 0, 0
    for pos, tok in _top_level_tokens(cond):
        if tok == "OR":
            return [cond]
        if tok == "BETWEEN":
            between += 1
        elif tok == "AND":
            if between:
                between -= 1
            else:
                parts.append(cond[start:pos])
                start = pos + 3
    parts.append(cond[start:])
    out: list[str] = []
    for p in parts:
        p = _strip_parens(p)
        sub = split_conjuncts(p) if p != cond and p.strip() else [p]
        out.extend(s for s in sub if s.strip())
    return out


def _comparisons(term: str) -> list[tuple[str, str, str]]:
    """A conjunct as comparisons (a, op, b): BETWEEN gives two; other shapes give none."""
    toks = list(_top_level_tokens(term))
    words = [t for _, t in toks]
    if "BETWEEN" in words:
        bpos = next(p for p, t in toks if t == "BETWEEN")
        if any(t == "NOT" and p < bpos for p, t in toks):
            return []
        apos = next((p for p, t in toks if t == "AND" and p > bpos), None)
        if apos is None:
            return []
        x, lo, hi = term[:bpos], term[bpos + 7:apos], term[apos + 3:]
        return [(x.strip(), ">=", lo.strip()), (x.strip(), "<=", hi.strip())]
    ops = [(p, t) for p, t in toks if t in _CMP]
    if len(ops) != 1:
        return []
    p, op = ops[0]
    return [(term[:p].strip(), op, term[p + len(op):].strip())]


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
    spec = JoinSpec(on, la, ra, [], [], [], [])
    for term in split_conjuncts(on):
        is_key = False
        for a, op, b in _comparisons(term):
            sa, sb = _side_of(a, left, right), _side_of(b, left, right)
            if sa is None or sb is None or sa == sb:
                continue
            if sa == "right":
                a, b, sa, sb = b, a, sb, sa
                op = {">": "<", "<": ">", ">=": "<=", "<=": ">="}.get(op, op)
            if op in ("=", "=="):
                spec.left_keys.append(a)
                spec.right_keys.append(b)
                is_key = True
                continue
            _add_bound(spec, a, op, b, left, right)
        if not is_key:
            spec.other_terms.append(term)
    _key_watermarks(spec, left, right)
    if not spec.left_keys and require_equality:
        raise AnalysisException(f"join: the condition {on!r} has no equality between a left and a right column "
                                "(e.g. \"l.ad_id = r.ad_id\"); a streaming join needs one")
    _outputs(spec, how, left, right, keys=None)
    return spec


def _add_bound(spec: JoinSpec, a: str, op: str, b: str, left: Side, right: Side) -> None:
    """a (left) op b (right), both `time column + constant`: record the state watermarks."""
    ta, tb = _time_offset_ms(a, left), _time_offset_ms(b, right)
    if ta is None or tb is None:
        return
    d = tb[1] - ta[1]          # left.t  op  right.t + d
    inclusive = op in (">=", "<=", "=", "==")
    adj = -1 if inclusive else 0
    if op in (">", ">=", "=", "=="):     # left lower bound: evict left rows with t <= W + d
        _offset(spec, "left", ta[0], d + adj)
    if op in ("<", "<=", "=", "=="):     # right.t >= left.t - d: evict right rows with t <= W - d
        _offset(spec, "right", tb[0], -d + adj)


_KEY_REF = re.compile(r'(?:(?:"(?:[^"]|"")+"|\w+)\.)?(?:"((?:[^"]|"")+)"|(\w+))')


def _key_watermarks(spec: JoinSpec, left: Side, right: Side) -> None:
    """A watermarked column among the equality keys of both sides (e.g. the `window` of two windowed
    aggregations): Spark's key state watermark. Rows (keys) with event time <= W are evicted (offset
    0; a window's event time is its end), and it takes precedence over a bound's."""
    for a, b in zip(spec.left_keys, spec.right_keys):
        ma, mb = _KEY_REF.fullmatch(a.strip()), _KEY_REF.fullmatch(b.strip())
        if not (ma and mb):
            continue
        ca, cb = (ma.group(1) or ma.group(2)).replace('""', '"'), (mb.group(1) or mb.group(2)).replace('""', '"')
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
    _outputs(spec, how, left, right, keys=cols)
    return spec


def _outputs(spec: JoinSpec, how: str, left: Side, right: Side, keys: list[str] | None) -> None:
    la, ra = quote_ident(spec.left_alias), quote_ident(spec.right_alias)
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
    spec.out_exprs = left_out if how == "left_semi" else out
    spec.left_out = left_out
    spec.qualifiers = quals


def one_sided_terms(on: Any, left: Side, right: Side) -> tuple[list[str], list[str]]:
    """The top-level conjuncts of a SQL `on` that reference the left side only / the right side only
    (Spark pushes these below the join, or uses them as the join's pre-join filter)."""
    if not isinstance(on, str):
        return [], []
    lt: list[str] = []
    rt: list[str] = []
    for term in split_conjuncts(on):
        side = _side_of(term, left, right)
        if side == "left":
            lt.append(term)
        elif side == "right":
            rt.append(term)
    return lt, rt


def not_null_columns(on: Any, side: Side, other: Side) -> list[str]:
    """Columns of `side` that Spark's InferFiltersFromConstraints adds `IS NOT NULL` filters for:
    the columns referenced by the condition's comparisons (equality keys, time bounds, other
    comparisons), or the key columns of a column-list `on`."""
    if isinstance(on, (list, tuple)):
        return [c for c in on if c in side.schema.names]
    if not isinstance(on, str):
        return []
    out: list[str] = []
    for term in split_conjuncts(on):
        for a, _op, b in _comparisons(term):
            for e in (a, b):
                e = re.sub(r"'(?:[^']|'')*'", "''", e)
                for m in re.finditer(r'(?<![\w."])(?:([A-Za-z_]\w*)\.)?([A-Za-z_]\w*)(?![\w"(])', e):
                    q, c = m.group(1), m.group(2)
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


def select_list(exprs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{e} AS {quote_ident(n)}" for e, n in exprs)


# -- qualified references in the SQL after a join ----------------------------------------------------
def qualify_sql(expr: str, quals: dict[str, dict[str, str]], as_select: bool = False) -> str:
    """Rewrite `alias.col` (outside string literals) to the join output's column name. In a select
    list, a bare `alias.col` becomes `"<output name>" AS "col"` and `alias.*` that side's columns."""
    if not quals:
        return expr
    names = "|".join(re.escape(a) for a in sorted(quals, key=len, reverse=True))
    if as_select:
        m = re.fullmatch(rf"\s*({names})\.(\*|[A-Za-z_]\w*|\"(?:[^\"]|\"\")+\")\s*", expr)
        if m:
            alias, col = m.group(1), m.group(2)
            if col == "*":
                return ", ".join(f"{quote_ident(o)} AS {quote_ident(c)}" for c, o in quals[alias].items())
            col = col[1:-1].replace('""', '"') if col.startswith('"') else col
            if col in quals[alias]:
                return f"{quote_ident(quals[alias][col])} AS {quote_ident(col)}"
            return expr
    pat = re.compile(rf"(?<![\w.\"])({names})\.([A-Za-z_]\w*|\"(?:[^\"]|\"\")+\")")

    def sub(m: re.Match) -> str:
        alias, col = m.group(1), m.group(2)
        col = col[1:-1].replace('""', '"') if col.startswith('"') else col
        return quote_ident(quals[alias][col]) if col in quals[alias] else m.group(0)

    out, i = [], 0
    while i < len(expr):                      # rewrite outside single-quoted literals only
        j = expr.find("'", i)
        if j < 0:
            out.append(pat.sub(sub, expr[i:]))
            break
        out.append(pat.sub(sub, expr[i:j]))
        k = _skip_quote(expr, j)
        out.append(expr[j:k])
        i = k
    return "".join(out)

"""Spark SQL's spelling of nested access and generators, translated into DuckDB SQL at compile time
(the input schema is known there), for the expressions of select / filter / with_column.

What differs between the two dialects, and what this module does about it:
- `arr[i]` on an ARRAY: Spark indexes from 0 and (ANSI, Spark 4's default) fails the batch when
  `i` is out of range (INVALID_ARRAY_INDEX); DuckDB indexes from 1 and gives NULL. A subscript on
  an expression of list type becomes `CASE ... (arr)[(i) + 1] ... ELSE error(...) END` (NULL array
  or index: NULL). Subscripts on a MAP (`m['k']`: the value or NULL) and on a STRUCT mean the same
  in both and are kept.
- `size(x)`: `len` of a list, `cardinality` of a map (NULL for NULL, as Spark 4 under ANSI).
- `e.user.*` (a star below the first level) expands to the struct's fields; `e.*` DuckDB does.
- Generators in a select item: `explode(x)`, `explode_outer(x)`, `posexplode(x)`,
  `posexplode_outer(x)` (what F.explode & co. write), optionally `AS name` / `AS (a, b)`. A list gives
  `col` (and `pos`, 0-based INT), a map `key` and `value`; the outer forms give one row of NULLs for a
  NULL or empty input. DuckDB's `unnest` (several in one SELECT run in lockstep). One generator per
  select, as in Spark.
- Names: a select item with a subscript and no alias is named as Spark names it (`tags[0]`,
  `attrs[k]`); `e.user.id` is `id` in both.

Text is tokenized (strings, quoted identifiers, numbers, brackets), never parsed by regular
expressions over raw SQL; a subscript whose base does not bind (a list literal, an unknown name)
is left as written, so DuckDB reports it.
"""
from __future__ import annotations

import re

from ..errors import AnalysisException
from ..identifiers import duckdb_ident as quote_ident
from ..lazy import lazy_module
from ..nested_json import json_to_sql
from ..types import parse_schema

pa = lazy_module("pyarrow")  # loaded at first use (increments/lazy.py): frames are declared without it




def run_sql(*args, **kwargs):
    from ..sql import run_sql as run  # noqa: PLC0415 - increments.sql (duckdb, numpy, pyarrow): kept off the code location's import path
    return run(*args, **kwargs)

GENERATORS = ("explode", "explode_outer", "posexplode", "posexplode_outer")
_TOKEN = re.compile(r"""\s+|'(?:[^']|'')*'|"(?:[^"]|"")*"|`(?:[^`]|``)*`|\d+(?:\.\d*)?|[A-Za-z_][A-Za-z0-9_$]*|::|->|.""", re.S)
_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "CASE", "WHEN", "THEN", "ELSE", "END", "SELECT", "FROM", "WHERE",
             "ARRAY", "LIST", "MAP", "STRUCT", "AS", "LIKE", "BETWEEN", "INTERVAL", "LAMBDA", "DISTINCT", "NULL"}


def _tokens(text: str) -> list[str]:
    out = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if tok.startswith("`"):          # Spark's quoted identifier: DuckDB's is "..."
            tok = '"' + tok[1:-1].replace("``", "`").replace('"', '""') + '"'
        out.append(tok)
    return out


def _is_name(tok: str) -> bool:
    return bool(tok) and (tok[0] == '"' or (tok[0].isalpha() or tok[0] == "_")) and tok.upper() not in _KEYWORDS


class _Ctx:
    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.empty = schema.empty_table()
        self.types: dict[str, pa.DataType | None] = {}
        self.changed = False          # any subscript seen (for naming)

    def type_of(self, sql: str) -> pa.DataType | None:
        if sql not in self.types:
            try:
                t = run_sql(f"SELECT {sql} AS __b FROM __t AS __in", {"__t": self.empty})
                self.types[sql] = t.schema.field(0).type
            except Exception:  # noqa: BLE001 - does not bind: left as written, DuckDB reports it
                self.types[sql] = None
        return self.types[sql]


def _is_list(t: pa.DataType | None) -> bool:
    return t is not None and (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _translate(toks: list[str], i: int, close: str | None, ctx: _Ctx) -> tuple[list[tuple[str, str]], int]:
    """Pieces (kind, text) up to the token `close` (consumed); kinds: 'ws', 'name', 'atom' (a
    parenthesised group, a subscript, a literal), 'op'."""
    out: list[tuple[str, str]] = []
    while i < len(toks):
        tok = toks[i]
        if tok == close:
            return out, i + 1
        if tok == "(":
            inner, i = _translate(toks, i + 1, ")", ctx)
            out.append(("group", "(" + _text(inner) + ")"))
            _call(out, ctx)
            continue
        if tok == "[":
            inner, i = _translate(toks, i + 1, "]", ctx)
            _subscript(out, _text(inner), ctx)
            continue
        if tok.isspace():
            out.append(("ws", tok))
        elif _is_name(tok):
            out.append(("name", tok))
        elif tok[0] in "'0123456789":
            out.append(("atom", tok))
        else:
            out.append(("op", tok))
        i += 1
    if close is not None:
        raise AnalysisException(f"unbalanced brackets: expected {close!r} in {''.join(toks)!r}")
    return out, i


def _text(pieces: list[tuple[str, str]]) -> str:
    return "".join(t for _, t in pieces)


def _chain_start(out: list[tuple[str, str]]) -> int | None:
    """Index in `out` where the postfix chain ending at out[-1] starts (a.b.c, f(x), x[0], (..))."""
    j = len(out) - 1
    if j < 0 or out[j][0] not in ("name", "group", "atom") or (out[j][0] == "atom" and out[j][1][:1] in "'0123456789"):
        return None
    while True:
        if out[j][0] == "group" and j > 0 and out[j - 1][0] == "name":
            j -= 1                                   # a function call
        if j >= 2 and out[j - 1] == ("op", ".") and out[j - 2][0] in ("name", "group", "atom"):
            j -= 2
            continue
        return j


def _subscript(out: list[tuple[str, str]], index: str, ctx: _Ctx) -> None:
    start = _chain_start(out)
    if start is None or ":" in index:                # a list literal [1, 2] or a slice: as written
        out.append(("atom", "[" + index + "]"))
        return
    base = _text(out[start:])
    ctx.changed = True
    if _is_list(ctx.type_of(base)):
        b, k = f"({base})", f"({index})"
        shown = f"{base}[{index}]".replace("'", "''")
        sql = (f"(CASE WHEN {b} IS NULL OR {k} IS NULL THEN NULL WHEN {k} >= 0 AND {k} < len({b}) "
               f"THEN {b}[{k} + 1] ELSE error('[INVALID_ARRAY_INDEX] The index ' || CAST({k} AS VARCHAR) || "
               f"' is out of bounds. The array has ' || CAST(len({b}) AS VARCHAR) || ' elements ({shown}): "
               f"arrays are indexed from 0; get(arr, i) gives NULL instead') END)")
        out[start:] = [("atom", sql)]
    else:
        out[start:] = [("atom", f"{base}[{index}]")]


def _call(out: list[tuple[str, str]], ctx: _Ctx) -> None:
    """Spark functions whose DuckDB counterpart depends on the argument's type, or has another name."""
    if len(out) < 2 or out[-2][0] not in ("name", "op"):
        return
    fn = out[-2][1].lower()
    arg = out[-1][1][1:-1]
    if fn in ("struct", "named_struct", "from_json"):
        before = [p for p in out[:-2] if p[0] != "ws"]
        if before and (before[-1][1].upper() == "AS" or before[-1][1] == "::"):
            return                               # a type: CAST(x AS STRUCT(a INT))
        sql = _struct_call(fn, arg, ctx)
        if sql is not None:
            out[-2:] = [("atom", sql)]
            ctx.changed = True
        return
    if out[-2][0] != "name":
        return
    if fn == "size":
        t = ctx.type_of(arg)
        if t is not None and pa.types.is_map(t):
            out[-2:] = [("atom", f"CAST(cardinality({arg}) AS INTEGER)")]
            ctx.changed = True
        elif _is_list(t):
            out[-2:] = [("atom", f"CAST(len({arg}) AS INTEGER)")]
            ctx.changed = True
        elif t is not None:
            raise AnalysisException(f"size({arg}) needs an ARRAY or MAP argument, not {t} (explode, posexplode and "
                                    "size take arrays and maps; DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE)")
    elif fn == "get":
        parts = _split_args(arg)
        if len(parts) == 2 and _is_list(ctx.type_of(parts[0])):
            b, k = f"({parts[0]})", f"({parts[1]})"
            out[-2:] = [("atom", f"(CASE WHEN {k} >= 0 AND {k} < len({b}) THEN {b}[{k} + 1] END)")]
            ctx.changed = True


def _struct_call(fn: str, arg: str, ctx: _Ctx) -> str | None:
    """Spark's struct(a, b AS x, *) / named_struct('x', a, ...) as struct_pack, and
    from_json(text, 'a INT, b STRING') as Spark's PERMISSIVE conversion (nested_json.py)."""
    args = [a for a in _split_args(arg) if a]
    if fn == "struct":
        for a in args:     # `name TYPE` fields: a STRUCT type inside a cast, not Spark's struct()
            sig = [t for t in _tokens(a) if not t.isspace()]
            if len(sig) >= 2 and _is_name(sig[0]) and (_is_name(sig[1]) or sig[1].upper() in ("STRUCT", "MAP")):
                return None
        fields = []
        for i, a in enumerate(args):
            if a == "*":
                fields += [(c, quote_ident(c)) for c in ctx.schema.names]
                continue
            toks = _tokens(a)
            body, names = _split_alias(toks)
            sig = [t for t in body if not t.isspace()]
            if names:
                name = names[0]
            elif sig and all(_is_name(t) for t in sig[0::2]) and all(t == "." for t in sig[1::2]):
                name = _unquote(sig[-1])
            else:
                name = f"col{i + 1}"
            fields.append((name, translate_expr("".join(body).strip(), ctx.schema)))
        return "struct_pack(" + ", ".join(f"{quote_ident(n)} := {e}" for n, e in fields) + ")" if fields else None
    if fn == "named_struct":
        if len(args) % 2 or not args:
            return None
        pairs = []
        for k, v in zip(args[0::2], args[1::2]):
            if not (k.startswith("'") and k.endswith("'")):
                return None
            pairs.append(f"{quote_ident(k[1:-1].replace(chr(39) * 2, chr(39)))} := {translate_expr(v, ctx.schema)}")
        return "struct_pack(" + ", ".join(pairs) + ")"
    if len(args) != 2 or not (args[1].startswith("'") and args[1].endswith("'")):
        return None
    try:
        schema = parse_schema(args[1][1:-1].replace("''", "'"))
    except ValueError as e:
        raise AnalysisException(f"from_json({arg}): {e}") from None
    struct = "STRUCT(" + ", ".join(f"{quote_ident(f.name)} {f.duckdb_type}" for f in schema.fields) + ")"
    return json_to_sql(f"TRY_CAST({translate_expr(args[0], ctx.schema)} AS JSON)", struct)


def _split_args(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for tok in _tokens(text):
        if tok in "([":
            depth += 1
        elif tok in ")]":
            depth -= 1
        if tok == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(tok)
    parts.append("".join(cur).strip())
    return parts


def translate_expr(expr: str, schema: pa.Schema) -> str:
    """`expr` (Spark's spelling of nested access) in DuckDB SQL over a relation of `schema`."""
    low = expr.lower()
    if not any(w in low for w in ("[", "size", "get", "`", "struct", "from_json")):
        return expr
    pieces, _ = _translate(_tokens(expr), 0, None, _Ctx(schema))
    return _text(pieces)


def _split_alias(toks: list[str]) -> tuple[list[str], list[str] | None]:
    """(expression tokens, alias names or None) of a select item `expr [AS] name | AS (a, b)`."""
    sig = [k for k, t in enumerate(toks) if not t.isspace()]
    if len(sig) >= 3 and toks[sig[-1]] == ")" :
        # AS (a, b)
        try:
            open_at = max(k for k in sig if toks[k] == "(")
        except ValueError:
            return toks, None
        before = [k for k in sig if k < open_at]
        if before and toks[before[-1]].upper() == "AS":
            names = [t for t in toks[open_at + 1:sig[-1]] if not t.isspace() and t != ","]
            return toks[:before[-1]], [_unquote(t) for t in names]
        return toks, None
    if len(sig) >= 3 and toks[sig[-2]].upper() == "AS" and _is_name(toks[sig[-1]]):
        return toks[:sig[-2]], [_unquote(toks[sig[-1]])]
    return toks, None


def _unquote(tok: str) -> str:
    return tok[1:-1].replace('""', '"') if tok.startswith('"') else tok


def _spark_name(expr: str) -> str:
    """Spark's name of an unaliased item with a subscript: the text, a string key unquoted."""
    text = "".join(_unquote(t) if t.startswith('"') else t for t in _tokens(expr.strip()))
    return re.sub(r"\[\s*'((?:[^']|'')*)'\s*\]", lambda m: "[" + m.group(1).replace("''", "'") + "]", text)


def generator_of(item: str) -> tuple[str, str, list[str] | None] | None:
    """(generator, argument SQL, alias names or None) when the select item is a generator call."""
    toks = _tokens(item)
    body, names = _split_alias(toks)
    sig = [t for t in body if not t.isspace()]
    if len(sig) < 3 or sig[0].lower() not in GENERATORS or sig[1] != "(" or sig[-1] != ")":
        return None
    depth = 0
    for t in sig[1:-1]:           # the parentheses after the name must close at the end
        depth += t == "("
        depth -= t == ")"
        if depth == 0:
            return None
    text = "".join(body).strip()
    return sig[0].lower(), text[text.index("(") + 1:text.rindex(")")], names


def _generator_sql(gen: str, arg_sql: str, names: list[str] | None, schema: pa.Schema, where: str) -> list[str]:
    ctx = _Ctx(schema)
    arg = translate_expr(arg_sql, schema)
    t = ctx.type_of(arg)
    outer, pos = gen.endswith("_outer"), gen.startswith("pos")
    if t is None or not (_is_list(t) or pa.types.is_map(t)):
        raise AnalysisException(f"{where}: {gen}({arg_sql}) needs an ARRAY or MAP argument, not "
                                f"{t if t is not None else 'an expression that does not bind'} "
                                f"(DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE)")
    is_map = pa.types.is_map(t)
    default = (["pos"] if pos else []) + (["key", "value"] if is_map else ["col"])
    names = names or default
    if len(names) != len(default):
        raise AnalysisException(f"{where}: {gen}({arg_sql}) yields {len(default)} column(s) {default}, but "
                                f"{len(names)} alias(es) {names} were given")
    a = f"({arg})"
    n = f"CAST({'cardinality' if is_map else 'len'}({a}) AS BIGINT)"
    lists = ([f"list_transform(generate_series(0, {n} - 1), lambda __i: CAST(__i AS INTEGER))"] if pos else [])
    lists += [f"map_keys({a})", f"map_values({a})"] if is_map else [a]
    if outer:
        lists = [f"(CASE WHEN {n} > 0 THEN {x} ELSE [NULL] END)" for x in lists]
    return [f"unnest({x}) AS {quote_ident(nm)}" for x, nm in zip(lists, names)]


def select_items(exprs: tuple[str, ...], schema: pa.Schema) -> list[str]:
    """The DuckDB select list for Spark-spelled items (see the module doc)."""
    out, generators = [], 0
    for e in exprs:
        if e in schema.names:
            out.append(quote_ident(e))
            continue
        gen = generator_of(e)
        if gen is not None:
            generators += 1
            if generators > 1:
                raise AnalysisException(f"select: only one generator (explode, posexplode, ...) is allowed per "
                                        f"select, as in Spark (UNSUPPORTED_GENERATOR.MULTI_GENERATOR): {list(exprs)}")
            out.extend(_generator_sql(gen[0], gen[1], gen[2], schema, "select"))
            continue
        star = _nested_star(e, schema)
        if star is not None:
            out.extend(star)
            continue
        toks = _tokens(e)
        body, names = _split_alias(toks)
        ctx = _Ctx(schema)
        low = e.lower()
        translate = any(w in low for w in ("[", "size", "get", "`", "struct", "from_json"))
        pieces, _ = _translate(body, 0, None, ctx) if translate else ([("atom", "".join(body))], 0)
        sql = _text(pieces)
        if names:
            out.append(f"{sql} AS {quote_ident(names[0])}")
        elif ctx.changed:
            out.append(f"{sql} AS {quote_ident(_spark_name(''.join(body)))}")
        else:
            out.append(sql)
    return out


def _nested_star(e: str, schema: pa.Schema) -> list[str] | None:
    """`a.b.*` (two levels or more, `a` a column): its fields as `a.b."f" AS "f"`, or None."""
    sig = [t for t in _tokens(e) if not t.isspace()]
    if len(sig) < 5 or sig[-1] != "*" or sig[-2] != ".":
        return None
    path = sig[:-2]
    if any(path[k] != "." for k in range(1, len(path), 2)) or not all(_is_name(p) for p in path[0::2]):
        return None
    parts = path[0::2]
    if len(parts) < 2 or _unquote(parts[0]) not in schema.names:
        return None
    base = ".".join(parts)
    t = _Ctx(schema).type_of(base)
    if t is None or not pa.types.is_struct(t):
        raise AnalysisException(f"select: {e!r}: {base} is {t if t is not None else 'not a column'}, not a STRUCT; "
                                "only a struct's fields can be selected with .*")
    return [f"{base}.{quote_ident(t.field(i).name)} AS {quote_ident(t.field(i).name)}" for i in range(t.num_fields)]


def with_column_expr(name: str, expr: str, schema: pa.Schema) -> str:
    """with_column's expression in DuckDB SQL; a generator yields one column (explode(x) / its
    outer form; posexplode and a map's explode yield two and are refused, as in Spark)."""
    gen = generator_of(expr)
    if gen is None:
        return translate_expr(expr, schema)
    items = _generator_sql(gen[0], gen[1], None, schema, f"with_column({name!r})")
    if len(items) != 1:
        raise AnalysisException(f"with_column({name!r}, {expr!r}): the generator yields {len(items)} columns; "
                                "use select(..., F.posexplode(...)) instead (Spark: "
                                "UDTF_ALIAS_NUMBER_MISMATCH)")
    return items[0].rsplit(" AS ", 1)[0]

"""SQL read by DuckDB's own parser, never by patterns: the expression tree of a condition or a
select item (``json_serialize_sql``), its tokens (``duckdb.tokenize``: identifiers, keywords,
operators, string constants and comments as DuckDB's lexer sees them), and the text of a tree's
parts.

Contract:
* ``parse_where(text)`` -> (statement tree, WHERE tree) of ``SELECT * FROM __t WHERE <text>``, or
  None when DuckDB cannot parse it (``parse_error(text)`` says why). ``parse_select(text)``: the
  trees of ``SELECT <text> FROM __t``'s items. Nothing is bound: names need not exist.
* ``where_sql(tree, node)``: one part of a parsed condition as SQL text, in DuckDB's spelling.
* ``conjuncts(e)``: the top-level AND terms (nested ANDs flattened); ``references(e, column)``,
  ``column_refs(e)``, ``deterministic(e)``: what a parsed expression reads.
* ``tokens(text)``; ``part_texts(text, parts, separators)``: the texts of a node's parts as they
  are written in `text` (the caller keeps the user's spelling: a join key's text is recorded in
  the checkpoint, and evaluated as written). The tree says what the parts are; each cut is made
  at a separator token (a keyword or operator of DuckDB's lexer, never inside a string, a quoted
  name or a comment) and accepted only when the piece parses to exactly that part.
"""
from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import duckdb

from .sql import duckdb_connection

_WHERE = "SELECT * FROM __t WHERE "
_NONDETERMINISTIC = {"random", "rand", "randn", "uuid", "gen_random_uuid", "uuidv4", "uuidv7", "setseed", "nextval"}
_LOCATION = ("query_location", "query_location_length")


# -- trees ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _serialize(sql: str) -> str:
    return duckdb_connection().execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchall()[0][0]


def _statement(sql: str) -> dict | None:
    try:
        tree = json.loads(_serialize(sql))
    except (duckdb.Error, TypeError, ValueError):
        return None
    if tree.get("error") or len(tree.get("statements") or ()) != 1:
        return None
    return tree


def parse_where(text: str) -> tuple[dict, dict] | None:
    """(the serialized SELECT, its WHERE tree) of `text` parsed by DuckDB as one condition, or None."""
    tree = _statement(_WHERE + text)
    try:
        return (tree, tree["statements"][0]["node"]["where_clause"]) if tree else None
    except (KeyError, IndexError, TypeError):
        return None


def parse_error(text: str) -> str:
    """DuckDB's reason for not parsing `text` as a condition ('' when it parses)."""
    try:
        tree = json.loads(_serialize(_WHERE + text))
    except (duckdb.Error, TypeError, ValueError) as e:
        return str(e)
    if tree.get("error"):
        return str(tree.get("error_message") or "syntax error")
    return "" if len(tree.get("statements") or ()) == 1 else "more than one statement"


def parse_select(text: str) -> list[dict] | None:
    """The trees of the items of `SELECT <text> FROM __t`, or None when DuckDB cannot parse it."""
    tree = _statement(f"SELECT {text} FROM __t")
    try:
        return tree["statements"][0]["node"]["select_list"] if tree else None
    except (KeyError, IndexError, TypeError):
        return None


def where_sql(tree: dict, where: dict) -> str | None:
    """`where` (a part of `tree`'s WHERE condition) as SQL text, DuckDB's spelling; None if it cannot."""
    one = copy.deepcopy(tree)
    one["statements"][0]["node"]["where_clause"] = where
    try:
        sql = duckdb_connection().execute("SELECT json_deserialize_sql(?::JSON)", [json.dumps(one)]).fetchall()[0][0]
    except duckdb.Error:
        return None
    idx = sql.upper().find(" WHERE ")          # the first one is the statement's own
    return sql[idx + len(" WHERE "):].rstrip(";") if idx >= 0 else None


def walk(e: Any) -> Iterator[dict]:
    if isinstance(e, dict):
        yield e
        for v in e.values():
            yield from walk(v)
    elif isinstance(e, list):
        for v in e:
            yield from walk(v)


def conjuncts(e: dict) -> list[dict]:
    if is_and(e):
        return [c for k in e["children"] for c in conjuncts(k)]
    return [e]


def is_and(e: dict) -> bool:
    return e.get("class") == "CONJUNCTION" and e.get("type") == "CONJUNCTION_AND"


def column_refs(e: Any) -> list[list[str]]:
    """The name parts of every column reference in `e` (`["i", "ad_id"]`, `["x"]`), in order."""
    return [[str(p) for p in x.get("column_names") or []] for x in walk(e) if x.get("class") == "COLUMN_REF"]


def references(e: dict, column: str) -> bool:
    """Whether the parsed expression `e` reads `column`: a column reference named so, bare or
    qualified (`alias.column`); a string literal spelling it does not count."""
    col = column.lower()
    for names in column_refs(e):
        low = [p.lower() for p in names]
        if low[:1] == [col] or low[1:2] == [col]:
            return True
    return False


def deterministic(e: dict) -> bool:
    return not any(x.get("class") == "FUNCTION" and str(x.get("function_name", "")).lower() in _NONDETERMINISTIC
                   for x in walk(e))


def without_location(e: Any) -> Any:
    """`e` without where its parts were in the text (two spellings of one expression compare equal)."""
    if isinstance(e, dict):
        return {k: without_location(v) for k, v in e.items() if k not in _LOCATION}
    if isinstance(e, list):
        return [without_location(v) for v in e]
    return e


def _shape(e: dict) -> str:
    return json.dumps(without_location(e), sort_keys=True)


@functools.lru_cache(maxsize=4096)
def _shape_of(text: str) -> str | None:
    parsed = parse_where(text)
    return _shape(parsed[1]) if parsed else None


# -- tokens and the text of a tree's parts --------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    start: int
    end: int            # exclusive, trailing white space excluded
    kind: str           # identifier, numeric_const, string_const, operator, keyword, comment
    text: str

    @property
    def name(self) -> str | None:
        """The name this token spells (a quoted name unquoted; a keyword such as `window` is one
        after a dot or where a name is expected), or None when it is no name."""
        if self.kind == "identifier" and self.text.startswith('"'):
            return self.text[1:-1].replace('""', '"')
        return self.text if self.kind in ("identifier", "keyword") and self.text.isidentifier() else None

    def op(self, *spellings: str) -> bool:
        """An operator or punctuation spelled as one of `spellings` (DuckDB 2.0.0's lexer calls a
        dot a numeric constant: the spelling decides, outside strings, names and comments)."""
        return self.text in spellings and self.kind not in ("string_const", "identifier", "comment")

    def word(self, *words: str) -> bool:
        """A keyword or name spelled as one of `words` (any case)."""
        return self.kind in ("keyword", "identifier") and self.text.upper() in words


def tokens(text: str) -> list[Token]:
    raw = duckdb.tokenize(text)
    out = []
    for i, (start, kind) in enumerate(raw):
        stop = raw[i + 1][0] if i + 1 < len(raw) else len(text)
        piece = text[start:stop].rstrip()
        out.append(Token(start, start + len(piece), str(kind).rsplit(".", 1)[-1], piece))
    return out


def bare_name(text: str) -> str | None:
    """The name `text` is when it is one name alone (`window`, `"a b"`), else None."""
    toks = [t for t in tokens(text) if t.kind != "comment"]
    return toks[0].name if len(toks) == 1 else None


def aliased(item: str) -> tuple[str, str] | None:
    """(name, expression text) of a select item written `<expression> AS <name>`, else None."""
    parsed = parse_select(item)
    toks = [t for t in tokens(item) if t.kind != "comment"]
    if not parsed or len(parsed) != 1 or not parsed[0].get("alias") or len(toks) < 3 or not toks[-2].word("AS"):
        return None
    if toks[-1].name != parsed[0]["alias"]:
        return None
    return toks[-1].name, item[:toks[-2].start].strip()


def trim(text: str) -> str:
    """`text` without surrounding comments and white space, and without the parentheses it opens
    or closes at its ends that it does not also close or open (a piece cut out of `(a AND b)`)."""
    toks = tokens(text)
    while toks and toks[0].kind == "comment":
        toks.pop(0)
    while toks and toks[-1].kind == "comment":
        toks.pop()
    depth = sum(t.op("(") - t.op(")") for t in toks)
    while depth > 0 and toks and toks[0].op("("):
        toks.pop(0)
        depth -= 1
    while depth < 0 and toks and toks[-1].op(")"):
        toks.pop()
        depth += 1
    return text[toks[0].start:toks[-1].end] if toks else ""


def strip_parens(text: str) -> str:
    """`text` without parentheses around all of it: `((a = b))` -> `a = b`, `(a) = (b)` unchanged."""
    while True:
        toks = tokens(text)
        if len(toks) < 2 or not toks[0].op("(") or not toks[-1].op(")"):
            return text
        depth = 0
        for i, t in enumerate(toks):
            depth += t.op("(") - t.op(")")
            if depth == 0 and i < len(toks) - 1:
                return text
        text = text[toks[1].start:toks[-2].end] if len(toks) > 2 else ""


Separator = Callable[[Token], bool]


def part_texts(text: str, parts: Sequence[dict], separators: Separator | Sequence[Separator]) -> list[str] | None:
    """The texts of `parts` (the children of `text`'s tree, in order) as written in `text`: cut at
    separator tokens (one predicate for every gap, or one per gap), each piece trimmed (trim) and
    accepted only when it parses to exactly its part. None when no such cut exists."""
    toks = tokens(text)
    out: list[str] = []
    start, ti = 0, 0
    for i, part in enumerate(parts):
        want = _shape(part)
        if i == len(parts) - 1:
            piece = trim(text[start:])
            return out + [piece] if piece and _shape_of(piece) == want else None
        sep = separators if callable(separators) else separators[i]
        for j in range(ti, len(toks)):
            if not sep(toks[j]):
                continue
            piece = trim(text[start:toks[j].start])
            if piece and _shape_of(piece) == want:
                out.append(piece)
                start, ti = toks[j].end, j + 1
                break
        else:
            return None
    return out

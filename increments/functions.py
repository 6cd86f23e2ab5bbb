"""Column functions for group_by keys and aggregations: `from increments import functions as F`.

Window keys yield a struct column named `window` (or `session_window`) with fields `start` and
`end`, as Spark does. Aggregates name their output like Spark (`count`, `sum(x)`, `avg(x)`, ...)
unless `.alias(name)` is given.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .durations import parse_duration_ms
from .identifiers import duckdb_ident
from .udf import arrow_udf, pandas_udf, udf  # noqa: F401 - F.udf, F.pandas_udf, F.arrow_udf (increments/udf.py)


@dataclass(frozen=True)
class WindowSpec:
    column: str
    size_ms: int
    slide_ms: int
    start_ms: int = 0
    name: str = "window"

    def alias(self, name: str) -> "WindowSpec":
        return replace(self, name=name)


@dataclass(frozen=True)
class SessionWindowSpec:
    column: str
    gap_ms: int
    name: str = "session_window"

    def alias(self, name: str) -> "SessionWindowSpec":
        return replace(self, name=name)


def window(column: str, duration: str | None = None, slide: str | None = None, start_time: str | None = None,
           **spark_names: str) -> WindowSpec:
    """Tumbling (no slide) or sliding event-time windows [start, end), aligned to the epoch.

    `F.window(col, duration, slide=None)`; PySpark's keyword names (windowDuration, slideDuration,
    startTime, window_duration, slide_duration) are accepted too."""
    duration = duration or spark_names.pop("window_duration", None) or spark_names.pop("windowDuration", None)
    slide = slide or spark_names.pop("slide_duration", None) or spark_names.pop("slideDuration", None)
    start_time = start_time or spark_names.pop("startTime", None)
    if spark_names:
        raise TypeError(f"window: unknown arguments {sorted(spark_names)}")
    if duration is None:
        raise TypeError("window: a duration is required, e.g. F.window('event_time', '1 hour')")
    size = parse_duration_ms(duration)
    step = parse_duration_ms(slide) if slide else size
    if size <= 0 or step <= 0:
        raise ValueError("window: durations must be positive")
    if step > size:
        raise ValueError(f"window: the slide ({slide}) must not exceed the window ({duration})")
    start = parse_duration_ms(start_time) if start_time else 0
    return WindowSpec(column, size, step, start % step)


def session_window(column: str, gap_duration: str | None = None, gap: str | None = None,
                   **spark_names: str) -> SessionWindowSpec:
    """Session windows: a row opens [t, t+gap); sessions of one key that touch or overlap merge."""
    text = gap_duration or gap or spark_names.pop("gapDuration", None)
    if spark_names or text is None:
        raise TypeError("session_window(column, gap_duration), e.g. F.session_window('event_time', '10 minutes')")
    gap = parse_duration_ms(text)
    if gap <= 0:
        raise ValueError("session_window: the gap must be positive")
    return SessionWindowSpec(column, gap)


_WINDOW_TIME = "(struct_extract({}, 'end') - INTERVAL 1 MICROSECOND)"


def window_time(window_column: str = "window") -> str:
    """The event time of a window: its end - 1 microsecond (Spark's window_time), as SQL text for
    select / with_column, or as the column of a second window: F.window(F.window_time("window"),
    "1 hour") aggregates the rows an earlier windowed aggregation emitted. It keeps the window's
    watermark, so the second aggregation may run in append mode (docs/semantics.md)."""
    return _WINDOW_TIME.format(col(window_column))


def window_time_source(expr: str) -> str | None:
    """The window column a window_time(...) SQL text reads, or None when it is not one."""
    m = re.fullmatch(r"\(struct_extract\(\"((?:[^\"]|\"\")+)\", 'end'\) - INTERVAL 1 MICROSECOND\)", expr.strip())
    return m.group(1).replace('""', '"') if m else None


@dataclass(frozen=True)
class AggExpr:
    func: str                # count, sum, min, max, avg, first, last
    column: str | None       # None for count(*)
    name: str | None = None  # output column name

    def alias(self, name: str) -> "AggExpr":
        return replace(self, name=name)

    @property
    def output_name(self) -> str:
        if self.name:
            return self.name
        if self.func == "count" and self.column is None:
            return "count"
        return f"{self.func}({self.column or '1'})"


def count(column: str | None = None) -> AggExpr:
    return AggExpr("count", None if column in (None, "*", "1") else column)


def sum(column: str) -> AggExpr:  # noqa: A001 - PySpark's name
    return AggExpr("sum", column)


def min(column: str) -> AggExpr:  # noqa: A001
    return AggExpr("min", column)


def max(column: str) -> AggExpr:  # noqa: A001
    return AggExpr("max", column)


def avg(column: str) -> AggExpr:
    return AggExpr("avg", column)


mean = avg


def first(column: str) -> AggExpr:
    return AggExpr("first", column)


def last(column: str) -> AggExpr:
    return AggExpr("last", column)


def col(name: str) -> "Column":
    """A column reference as SQL text (expressions are DuckDB SQL), read as PySpark's col(): a dotted
    name is a nested field (`col("e.user.id")`: "e"."user"."id"), `e.*` a struct's fields, and a
    name in backticks is one column whatever it holds (`col("`a.b`")`)."""
    name = str(name)
    if name == "*" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\.\*", name):
        return Column(name)
    if len(name) > 1 and name[0] == name[-1] == "`":
        return Column(duckdb_ident(name[1:-1].replace("``", "`")))
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+", name):
        return Column(".".join(duckdb_ident(p) for p in name.split(".")))
    return Column(duckdb_ident(name))


def expr(sql: str) -> str:
    return sql


class Column(str):
    """A column expression as SQL text (what select / filter / with_column take), with PySpark's
    `.alias(name)`; a generator's `.alias("k", "v")` names each of its columns."""

    def alias(self, *names: str) -> "Column":
        if not names:
            raise TypeError("alias needs a name")
        if len(names) == 1:
            return Column(f"{self} AS {duckdb_ident(names[0])}")
        return Column(f"{self} AS ({', '.join(duckdb_ident(n) for n in names)})")

    name = alias

    def getItem(self, key) -> "Column":  # noqa: N802 - PySpark's name
        """An ARRAY's element (0-based, as Spark's []) or a MAP's value: `col("tags").getItem(0)`."""
        k = "'" + key.replace("'", "''") + "'" if isinstance(key, str) else str(int(key))
        return Column(f"{self}[{k}]")

    def getField(self, name: str) -> "Column":  # noqa: N802 - PySpark's name
        """A STRUCT's field: `col("e").getField("n")`."""
        return Column(f"{self}.{duckdb_ident(name)}")

    get_item, get_field = getItem, getField


def _arg(column: str) -> str:
    """A column name (quoted) or an expression (kept as SQL text)."""
    return col(column) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", column) else str(column)


def explode(column: str) -> Column:
    """One row per element of an ARRAY (column `col`) or entry of a MAP (`key`, `value`); a row
    whose array or map is NULL or empty yields no row (and, as in Spark, never moves the watermark:
    the frame filters such rows before the watermark sees them). For select / with_column."""
    return Column(f"explode({_arg(column)})")


def explode_outer(column: str) -> Column:
    """explode, but a NULL or empty array / map yields one row of NULLs."""
    return Column(f"explode_outer({_arg(column)})")


def posexplode(column: str) -> Column:
    """explode with the element's 0-based position first (`pos` INT, then `col`, or `key`, `value`)."""
    return Column(f"posexplode({_arg(column)})")


def posexplode_outer(column: str) -> Column:
    """posexplode, but a NULL or empty array / map yields one row of NULLs."""
    return Column(f"posexplode_outer({_arg(column)})")


def size(column: str) -> Column:
    """The number of elements of an ARRAY or entries of a MAP; NULL for NULL (Spark 4, ANSI)."""
    return Column(f"size({_arg(column)})")


def struct(*columns: str) -> Column:
    """A STRUCT of the columns (Spark's struct(); `struct("*")` of every column), each field named
    after its column (or alias)."""
    return Column(f"struct({', '.join(_arg(c) if c != '*' else '*' for c in columns)})")


def to_json(column: str) -> Column:
    """A STRUCT, ARRAY or MAP as JSON text (e.g. a Kafka sink's value: to_json(struct("*")))."""
    return Column(f"to_json({_arg(column)})")


def from_json(column: str, schema: str) -> Column:
    """JSON text into a STRUCT of `schema` (a DDL string), by Spark's PERMISSIVE rules (NULL for
    what does not convert); parse_json is the same for a whole frame."""
    return Column(f"from_json({_arg(column)}, '{str(schema).replace(chr(39), chr(39) * 2)}')")

"""Column functions for group_by keys and aggregations: `from increments import functions as F`.

Window keys yield a struct column named `window` (or `session_window`) with fields `start` and
`end`, as Spark does. Aggregates name their output like Spark (`count`, `sum(x)`, `avg(x)`, ...)
unless `.alias(name)` is given.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .durations import parse_duration_ms


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


def window(column: str, window_duration: str, slide_duration: str | None = None,
           start_time: str | None = None) -> WindowSpec:
    """Tumbling (no slide) or sliding event-time windows [start, end), aligned to the epoch."""
    size = parse_duration_ms(window_duration)
    slide = parse_duration_ms(slide_duration) if slide_duration else size
    if size <= 0 or slide <= 0:
        raise ValueError("window: durations must be positive")
    if slide > size:
        raise ValueError(f"window: the slide ({slide_duration}) must not exceed the window ({window_duration})")
    start = parse_duration_ms(start_time) if start_time else 0
    return WindowSpec(column, size, slide, start % slide)


def session_window(column: str, gap_duration: str) -> SessionWindowSpec:
    """Session windows: a row opens [t, t+gap); sessions of one key that touch or overlap merge."""
    gap = parse_duration_ms(gap_duration)
    if gap <= 0:
        raise ValueError("session_window: the gap must be positive")
    return SessionWindowSpec(column, gap)


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


def col(name: str) -> str:
    """A column reference as SQL text (expressions are DuckDB SQL)."""
    return '"' + name.replace('"', '""') + '"'


def expr(sql: str) -> str:
    return sql

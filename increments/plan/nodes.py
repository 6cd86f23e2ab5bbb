"""Logical plan nodes. Frames build these; the planner validates and compiles them.

Nodes are immutable; `children` lists their inputs. Expressions are DuckDB SQL text.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..types import Schema


@dataclass(frozen=True, eq=False)
class Node:
    @property
    def children(self) -> tuple["Node", ...]:
        return ()

    def walk(self):
        """Pre-order traversal of the tree."""
        yield self
        for c in self.children:
            yield from c.walk()


@dataclass(frozen=True, eq=False)
class Unary(Node):
    child: Node

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.child,)


@dataclass(frozen=True, eq=False)
class SourceNode(Node):
    source: Any  # increments.sources.base.Source


@dataclass(frozen=True, eq=False)
class StaticNode(Node):
    """A static (batch) table on one side of a stream-static join: re-read every batch."""
    loader: Any  # callable -> pa.Table, with a `description`


@dataclass(frozen=True, eq=False)
class Select(Unary):
    exprs: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Filter(Unary):
    condition: str = ""


@dataclass(frozen=True, eq=False)
class WithColumn(Unary):
    name: str = ""
    expr: str = ""


@dataclass(frozen=True, eq=False)
class ParseJson(Unary):
    schema: Schema = None  # type: ignore[assignment]
    column: str = "value"
    keep: tuple[str, ...] = ()          # input columns kept beside the parsed ones
    dead_letter: Any = None             # a DeadLetter target, or None to fail the batch


@dataclass(frozen=True, eq=False)
class WithWatermark(Unary):
    column: str = ""
    delay_ms: int = 0
    late_rows: Any = None               # a DeadLetter target for rows stateful operators drop as late


@dataclass(frozen=True, eq=False)
class Alias(Unary):
    name: str = ""


@dataclass(frozen=True, eq=False)
class Sort(Unary):
    exprs: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Limit(Unary):
    n: int = 0


@dataclass(frozen=True, eq=False)
class Aggregate(Unary):
    keys: tuple[Any, ...] = ()   # str column names or functions.WindowSpec / SessionWindowSpec
    aggs: tuple[Any, ...] = ()   # functions.AggExpr


@dataclass(frozen=True, eq=False)
class Deduplicate(Unary):
    subset: tuple[str, ...] | None = None
    within_watermark: bool = False


@dataclass(frozen=True, eq=False)
class Join(Node):
    left: Node = None  # type: ignore[assignment]
    right: Node = None  # type: ignore[assignment]
    on: Any = None
    how: str = "inner"

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, eq=False)
class Union(Node):
    """UNION ALL of two frames: by position, or by name (`by_name`), the right side's missing
    columns filled with NULL when `allow_missing_columns`. Each input keeps its own watermark."""
    left: Node = None  # type: ignore[assignment]
    right: Node = None  # type: ignore[assignment]
    by_name: bool = False
    allow_missing_columns: bool = False

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, eq=False)
class TransformWithState(Unary):
    keys: tuple[str, ...] = ()
    processor: Any = None
    output_schema: Schema = None  # type: ignore[assignment]
    time_mode: str | None = None
    output_mode: str = "append"
    options: dict = field(default_factory=dict)
    initial_state: Any = None     # a static Node of per-key initial state rows, or None
    initial_state_keys: tuple[str, ...] = ()   # its key columns, matched to `keys` by position


@dataclass(frozen=True, eq=False)
class Expect(Unary):
    """expect / expect_all: (name, SQL condition, on_violation) each; operators/expectations.py."""
    expectations: tuple[tuple[str, str, str], ...] = ()
    quarantine: Any = None              # a DeadLetter target for the rows "drop" expectations remove


@dataclass(frozen=True, eq=False)
class ApplyChanges(Unary):
    """write_stream.apply_changes(...): AUTO CDC at the plan's root (operators/apply_changes.py)."""
    spec: Any = None                    # operators.apply_changes.ApplyChangesSpec


STATEFUL = (Aggregate, Deduplicate, TransformWithState)


def is_streaming(node: Node) -> bool:
    return any(isinstance(n, SourceNode) for n in node.walk())

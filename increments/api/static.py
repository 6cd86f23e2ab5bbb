"""Static tables (the non-streaming side of a stream-static join, or a transform_with_state
initial state) and their plan node.

Both api/frame.py (join, initial_state) and api/reader.py (inc.read.*) need these; they live here
so that neither of those two modules imports the other inside a function.
"""
from __future__ import annotations

import copy
from typing import Any

from ..lazy import lazy_module

from ..plan import nodes as n

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py


class StaticTable:
    """A static side: a loader the join re-runs every batch (Delta: at the table's latest version)."""

    def __init__(self, description: str, load_fn: Any, schema_fn: Any):
        self.description = description
        self._load, self._schema = load_fn, schema_fn
        self.last_version: Any = None
        self.alias_name: str | None = None

    def alias(self, name: str) -> "StaticTable":
        """Qualify the static side's columns (`d.ad_id`) in a join condition, as StreamFrame.alias."""
        out = copy.copy(self)
        out.alias_name = name
        return out

    def load(self) -> pa.Table:
        out = self._load()
        if isinstance(out, tuple):
            out, self.last_version = out
        return out

    def schema(self) -> pa.Schema:
        return self._schema()


def as_static_node(other: Any) -> n.Node:
    """The plan node of a static table or a pyarrow.Table (an Alias over it when aliased)."""
    if isinstance(other, StaticTable):
        node = n.StaticNode(other)
        return n.Alias(node, other.alias_name) if other.alias_name else node
    if isinstance(other, pa.Table):
        return n.StaticNode(StaticTable("arrow table", lambda t=other: t, lambda t=other: t.schema))
    raise TypeError(f"join: cannot join with {type(other).__name__}; use a stream frame, inc.read.delta(path), "
                    "inc.read.files(...) or a pyarrow.Table")

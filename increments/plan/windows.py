"""Plan rewrite: a time window over the window column of an earlier windowed aggregation.

`F.window("window", ...)` grouping the output of `group_by(F.window(...))` windows that window's
event time, as Spark does: window_time(window) = window.end - 1 µs (verified on Spark 4.3). The
aggregation's builder (operators/aggregate.py) applies `window_over_windows` before building.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa

from ..functions import WindowSpec, window_time
from . import nodes as n


def window_over_windows(compiler: Any, node: n.Aggregate) -> n.Aggregate:
    """`node` with every F.window(c) whose column c is a window struct (start, end) of its input
    replaced by F.window over a new column window_time(c); `node` itself when there is none. The
    input's schema comes from a fresh compiler of `compiler`'s class (so `compiler`'s operator ids
    and sources are untouched)."""
    if not any(isinstance(k, WindowSpec) for k in node.keys) or not any(
            isinstance(x, n.Aggregate) for x in node.child.walk()):
        return node
    schema = type(compiler)(check=False).build(node.child).schema
    child, keys = node.child, []
    for k in node.keys:
        if (isinstance(k, WindowSpec) and k.column in schema.names
                and pa.types.is_struct(schema.field(k.column).type)):
            name = f"window_time({k.column})"
            child = n.WithColumn(child, name, window_time(k.column))
            k = dataclasses.replace(k, column=name)
        keys.append(k)
    return dataclasses.replace(node, child=child, keys=tuple(keys))

"""Logical nodes of Python logic in a query (increments/udf.py builds them; their builders are in
plan/builders.py): UdfEval (UDF calls over argument columns), UdfFilter, DropColumns (hidden columns removed
after the step that read them), MapBatches (map_in_arrow / map_in_pandas). Light: no engine import."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..types import parse_schema
from . import nodes as n


@dataclass(frozen=True, eq=False)
class UdfEval(n.Unary):
    """Each UDF's result column from its argument columns: input columns read as they are (a
    plain column name, an inner UDF's result) or hidden ones `<token>_a<j>` a SQL stage below
    computed (dropped here). The result is named `<token>`, or `outputs[i]` when set (with_column
    of a bare call: the named column, replaced in place if it exists)."""
    udfs: tuple[Any, ...] = ()          # increments.udf.UserDefinedFunction each
    tokens: tuple[str, ...] = ()        # the call's hidden result column
    args: tuple[tuple[str, ...], ...] = ()   # the argument columns of each
    displays: tuple[str, ...] = ()      # the call as Spark names it (for messages)
    outputs: tuple[str | None, ...] = ()     # the result's column name, None: the token


@dataclass(frozen=True, eq=False)
class UdfFilter(n.Unary):
    """filter(condition) whose SQL text reads UDF results (increments/udf.py): placed around
    with_watermark as Spark's pushdown places a filter (plan/udf_pushdown.py), then expanded."""
    condition: str = ""


@dataclass(frozen=True, eq=False)
class DropColumns(n.Unary):
    names: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class MapBatches(n.Unary):
    """map_in_arrow / map_in_pandas (operators/map_batches.py)."""
    func: Any = None
    schema: Any = None          # increments.types.Schema of the output
    kind: str = "arrow"         # "arrow" | "pandas"
    #: its output columns are new: no with_watermark below it reaches the operators above (validate.py)
    resets_watermarks = True


def map_batches_node(child: n.Node, func: Any, schema: Any, kind: str) -> MapBatches:
    what = f"map_in_{kind}"
    if not callable(func):
        raise TypeError(f"{what}: {func!r} is not callable; pass a function over an iterator of "
                        f"{'pyarrow.RecordBatch' if kind == 'arrow' else 'pandas.DataFrame'}")
    try:
        parsed = parse_schema(schema)
    except (ValueError, TypeError) as e:
        raise TypeError(f"{what}: schema {schema!r}: {e}") from None
    return MapBatches(child, func, parsed, kind)

"""StreamFrame: a lazily built streaming query (PySpark's DataFrame for streams).

Every method returns a new frame; nothing runs until `write_stream...start()`.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..durations import parse_duration_ms
from ..errors import AnalysisException
from ..plan.spark_sql import generator_of
from ..udf import Column
from ..functions import AggExpr, SessionWindowSpec, WindowSpec, window_time_source
from ..plan import nodes as n, udf_rewrite
from ..plan.udf_nodes import map_batches_node
from ..types import parse_schema
from .static import as_static_node
from .writer import DataStreamWriter


class StreamFrame:
    def __init__(self, node: n.Node):
        self._node = node

    @property
    def node(self) -> n.Node:
        return self._node

    @property
    def is_streaming(self) -> bool:
        return n.is_streaming(self._node)

    # -- stateless ------------------------------------------------------------------------
    def select(self, *exprs: str) -> "StreamFrame":
        if len(exprs) == 1 and isinstance(exprs[0], (list, tuple)):
            exprs = tuple(exprs[0])
        if not exprs:
            raise ValueError("select needs at least one expression")
        if udf_rewrite.has_udf(*exprs):   # UDF calls: evaluated on Arrow below this step (plan/udf_rewrite.py)
            return StreamFrame(udf_rewrite.select(self._node, exprs))
        return StreamFrame(n.Select(_generator_filter(self._node, exprs), tuple(str(e) for e in exprs)))

    def filter(self, condition: str) -> "StreamFrame":
        if udf_rewrite.has_udf(condition):
            return StreamFrame(udf_rewrite.filter(self._node, condition))
        return StreamFrame(n.Filter(self._node, condition))

    where = filter

    def with_column(self, name: str, expr: str) -> "StreamFrame":
        if udf_rewrite.has_udf(expr):
            return StreamFrame(udf_rewrite.with_column(self._node, name, expr))
        return StreamFrame(n.WithColumn(_generator_filter(self._node, (expr,)), name, str(expr)))

    withColumn = with_column

    def map_in_arrow(self, func: Any, schema: Any) -> "StreamFrame":
        """fn(iterator of pyarrow.RecordBatch) yielding RecordBatches of `schema`, per batch,
        stateless (Spark's mapInArrow; operators/map_batches.py)."""
        return StreamFrame(map_batches_node(self._node, func, schema, "arrow"))

    def map_in_pandas(self, func: Any, schema: Any) -> "StreamFrame":
        """fn(iterator of pandas.DataFrame) yielding DataFrames of `schema` (Spark's mapInPandas)."""
        return StreamFrame(map_batches_node(self._node, func, schema, "pandas"))

    mapInArrow, mapInPandas = map_in_arrow, map_in_pandas

    def parse_json(self, schema: Any, column: str = "value", keep: "list[str] | tuple[str, ...]" = (),
                   dead_letter: Any = None) -> "StreamFrame":
        """Decode the JSON text (or bytes) in `column` into typed columns, vectorised in DuckDB.

        `keep` names input columns to carry beside the parsed ones (e.g. "timestamp", "offset").
        A value that is not valid JSON or has a wrongly typed field fails the batch, naming the
        topic/partition/offset (Kafka) or row; with `dead_letter=inc.dead_letter.delta(path)` such rows
        go to that table instead and are counted in progress.
        """
        return StreamFrame(n.ParseJson(self._node, parse_schema(schema), column, tuple(keep), dead_letter))

    def with_watermark(self, column: str, delay: str, late_rows: Any = None) -> "StreamFrame":
        """Declare the event-time column and how late rows may arrive. With
        `late_rows=inc.dead_letter.delta(path)`, every input row a stateful operator drops as late
        is appended to that Delta table (with batch_id, operator, watermark), once per batch."""
        _top_level("with_watermark", (column,))
        return StreamFrame(n.WithWatermark(self._node, column, parse_duration_ms(delay), late_rows))

    withWatermark = with_watermark

    def expect(self, name: str, condition: str, on_violation: str = "warn", quarantine: Any = None) -> "StreamFrame":
        """A data-quality expectation on the rows here (operators/expectations.py): per batch the rows
        passing `condition` (TRUE) and failing it (FALSE or NULL) are counted in progress
        ["expectations"]; on_violation "warn" keeps them, "drop" removes failing rows (to
        `quarantine=inc.dead_letter.delta(path)` if given), "fail" fails the batch uncommitted."""
        return self.expect_all({name: condition}, on_violation, quarantine)

    def expect_all(self, expectations: dict[str, str], on_violation: str = "warn",
                   quarantine: Any = None) -> "StreamFrame":
        """Several expectations ({name: condition}) with one action, judged on the same rows."""
        if not isinstance(expectations, dict) or not expectations:
            raise TypeError("expect_all: pass a non-empty dict {name: SQL condition}")
        for k, v in expectations.items():
            udf_rewrite.refuse(v, "an expectation's condition")
            if not isinstance(k, str) or not k.strip() or not isinstance(v, str) or not v.strip():
                raise TypeError(f"expect: name {k!r} and condition {v!r} must be non-empty strings")
        how = str(on_violation).lower()
        return StreamFrame(n.Expect(self._node, tuple((k, v, how) for k, v in expectations.items()), quarantine))

    def expect_or_drop(self, name: str, condition: str, quarantine: Any = None) -> "StreamFrame":
        return self.expect(name, condition, "drop", quarantine)

    def expect_or_fail(self, name: str, condition: str) -> "StreamFrame":
        return self.expect(name, condition, "fail")

    def alias(self, name: str) -> "StreamFrame":
        return StreamFrame(n.Alias(self._node, name))

    # -- refused by the planner (kept so the error is clear) -----------------------------------
    def order_by(self, *exprs: str) -> "StreamFrame":
        return StreamFrame(n.Sort(self._node, tuple(exprs)))

    sort = order_by

    def limit(self, num: int) -> "StreamFrame":
        return StreamFrame(n.Limit(self._node, int(num)))

    # -- stateful ---------------------------------------------------------------------------
    def group_by(self, *keys: Any) -> "GroupedFrame":
        if len(keys) == 1 and isinstance(keys[0], (list, tuple)):
            keys = tuple(keys[0])
        return GroupedFrame(self, tuple(keys))

    groupBy = group_by

    def drop_duplicates(self, subset: "list[str] | None" = None) -> "StreamFrame":
        _top_level("drop_duplicates", subset or ())
        return StreamFrame(n.Deduplicate(self._node, tuple(subset) if subset else None, False))

    dropDuplicates = drop_duplicates

    def drop_duplicates_within_watermark(self, subset: "list[str] | None" = None) -> "StreamFrame":
        _top_level("drop_duplicates_within_watermark", subset or ())
        return StreamFrame(n.Deduplicate(self._node, tuple(subset) if subset else None, True))

    def join(self, other: Any, on: Any, how: str = "inner") -> "StreamFrame":
        how = how.lower().replace("leftouter", "left_outer").replace("rightouter", "right_outer")
        how = {"left": "left_outer", "right": "right_outer", "outer": "full_outer", "full": "full_outer",
               "fullouter": "full_outer", "semi": "left_semi", "leftsemi": "left_semi"}.get(how, how)
        if how not in ("inner", "left_outer", "right_outer", "full_outer", "left_semi"):
            raise ValueError(f"join: how={how!r} is not one of inner, left_outer, right_outer, full_outer, left_semi")
        udf_rewrite.refuse(on, "a join condition")
        right = other.node if isinstance(other, StreamFrame) else as_static_node(other)
        if isinstance(on, str) and " " not in on.strip() and "=" not in on:
            on = [on]
        return StreamFrame(n.Join(left=self._node, right=right, on=tuple(on) if isinstance(on, list) else on, how=how))

    def union(self, other: "StreamFrame") -> "StreamFrame":
        """UNION ALL by position (Spark's union): the columns of `other` are matched to this frame's by
        their order and take this frame's names. Each input keeps its own watermark; the query's
        global watermark is the min over them (`multiple_watermark_policy` "max": the max)."""
        return StreamFrame(n.Union(self._node, _frame_node(other, "union"), False, False))

    unionAll = union_all = union

    def union_by_name(self, other: "StreamFrame", allow_missing_columns: bool = False) -> "StreamFrame":
        """UNION ALL matching columns by name (Spark's unionByName). Without allow_missing_columns both
        sides must have the same column names; with it, a column missing on one side is NULL there
        (the right side's extra columns come last)."""
        return StreamFrame(n.Union(self._node, _frame_node(other, "union_by_name"), True, bool(allow_missing_columns)))

    def unionByName(self, other: "StreamFrame", allowMissingColumns: bool = False) -> "StreamFrame":
        return self.union_by_name(other, allowMissingColumns)

    # -- output -----------------------------------------------------------------------------
    @property
    def write_stream(self):
        return DataStreamWriter(self)

    writeStream = write_stream

    @property
    def schema(self):
        """The output schema (Arrow), derived by compiling the plan without running it."""
        from ..plan.compiler import output_schema  # noqa: PLC0415 - increments.plan.compiler (deltalake, duckdb, numpy, pyarrow): kept off the code location's import path
        return output_schema(self._node)

    def explain(self) -> str:
        from ..plan.compiler import explain  # noqa: PLC0415 - increments.plan.compiler (deltalake, duckdb, numpy, pyarrow): kept off the code location's import path
        return explain(self._node)

    def __repr__(self) -> str:
        return f"StreamFrame({type(self._node).__name__})"


def _top_level(what: str, columns) -> None:
    """Spark resolves dedup keys and the watermark column among the top-level columns only: a
    nested field (`e.n`) is refused as the frame is built (UNRESOLVED_COLUMN_AMONG_FIELD_NAMES)."""
    for c in columns:
        if isinstance(c, str) and _NESTED_FIELD.fullmatch(c):
            raise AnalysisException(
                f"{what}: {c!r} is a nested field; Spark takes only top-level columns here "
                f"(UNRESOLVED_COLUMN_AMONG_FIELD_NAMES). Make it a column first: "
                f".with_column({c.rsplit('.', 1)[1]!r}, {c!r}) and use {c.rsplit('.', 1)[1]!r}")


def _generator_filter(node: n.Node, exprs: tuple) -> n.Node:
    """Spark infers `x IS NOT NULL AND size(x) > 0` below an explode / posexplode (not the outer
    forms) and pushes it below the watermark like any filter (rows without elements never move
    the watermark) and its IS NOT NULL into a JSON / CSV scan (num_input_rows excludes NULL
    arrays). The same filter, as a node before the select."""
    for e in exprs:
        gen = generator_of(str(e))
        if gen is not None and not gen[0].endswith("_outer"):
            return n.Filter(node, f"{gen[1]} IS NOT NULL AND size({gen[1]}) > 0")
    return node


def _frame_node(other: Any, what: str) -> n.Node:
    if not isinstance(other, StreamFrame):
        raise TypeError(f"{what}: {other!r} is not a frame; union two frames (streams, or a stream and a "
                        "static frame)")
    return other.node


def _initial_state_node(value: Any, keys: tuple[str, ...]) -> tuple[n.Node, tuple[str, ...]]:
    init_keys = keys
    if isinstance(value, GroupedFrame):
        init_keys = tuple(k for k in value._keys if isinstance(k, str))
        if len(init_keys) != len(value._keys) or len(init_keys) != len(keys):
            raise ValueError(f"transform_with_state: initial_state is grouped by {value._keys!r}; group it by "
                             f"{len(keys)} plain column(s), as the stream is grouped by {keys!r}")
        value = value._frame
    node = value.node if isinstance(value, StreamFrame) else as_static_node(value)
    if n.is_streaming(node):
        raise ValueError("transform_with_state: initial_state must be static (a pyarrow.Table, inc.read.delta/"
                         "files(...) or a frame over one), not a stream")
    return node, init_keys


_NESTED_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


class GroupedFrame:
    def __init__(self, frame: StreamFrame, keys: tuple[Any, ...]):
        for k in keys:
            if not isinstance(k, (str, WindowSpec, SessionWindowSpec, Column)):
                raise TypeError(f"group_by key {k!r}: use a column name, F.window(...), F.session_window(...) or "
                                "a UDF call")
        self._frame, self._keys = frame, keys

    def count(self) -> StreamFrame:
        return self.agg(AggExpr("count", None))

    def agg(self, *aggs: AggExpr) -> StreamFrame:
        if not aggs:
            raise ValueError("agg needs at least one aggregate, e.g. F.count()")
        for a in aggs:
            if not isinstance(a, AggExpr):
                raise TypeError(f"agg: {a!r} is not an aggregate; use F.count(), F.sum('x'), ...")
        child, keys = self._frame.node, []
        # a nested field (`e.user.country`, Spark's groupBy("e.user.country") / F.min("e.n")): computed
        # as a column first, a key named after its last part (as Spark names it), an aggregate's
        # input under its own text (the output is then `min(e.n)`, as in Spark)
        plain = []
        for k in self._keys:
            if isinstance(k, str) and _NESTED_FIELD.fullmatch(k):
                child = n.WithColumn(child, k.rsplit(".", 1)[1], k)
                k = k.rsplit(".", 1)[1]
            plain.append(k)
        for a in aggs:
            if a.column is not None and _NESTED_FIELD.fullmatch(a.column):
                child = n.WithColumn(child, a.column, a.column)
        for k in plain:   # F.window(F.window_time("window"), ...): the event time as a column first
            if isinstance(k, WindowSpec) and window_time_source(k.column) is not None:
                name = f"window_time({window_time_source(k.column)})"
                child = n.WithColumn(child, name, k.column)
                k = dataclasses.replace(k, column=name)
            if isinstance(k, Column):   # a UDF key: computed into a column named like Spark's
                child, k = udf_rewrite.with_column(child, udf_rewrite.key_name(k), k), udf_rewrite.key_name(k)
            keys.append(k)
        return StreamFrame(n.Aggregate(child, tuple(keys), tuple(aggs)))

    def sum(self, *cols: str) -> StreamFrame:
        return self.agg(*(AggExpr("sum", c) for c in cols))

    def avg(self, *cols: str) -> StreamFrame:
        return self.agg(*(AggExpr("avg", c) for c in cols))

    def min(self, *cols: str) -> StreamFrame:
        return self.agg(*(AggExpr("min", c) for c in cols))

    def max(self, *cols: str) -> StreamFrame:
        return self.agg(*(AggExpr("max", c) for c in cols))

    def transform_with_state(self, processor: Any, output_schema: Any, time_mode: str | None = None,
                             output_mode: str = "append", initial_state: Any = None, **options: Any) -> StreamFrame:
        """Arbitrary stateful processing per key (Spark 4's transformWithState).

        `initial_state`: per-key initial state, applied in the query's first batch (batch 0) only:
        a pyarrow.Table, inc.read.delta/files(...), a static frame, or such a frame's group_by(keys)
        (its keys matched to these by position; otherwise columns named like these keys). For each
        of its rows the processor's handle_initial_state(key, row, timer_values) runs (before the
        key's input rows, if any); a key may have several rows. A restart never re-applies it."""
        if time_mode not in (None, "none", "processing_time", "event_time", "processingtime", "eventtime"):
            raise ValueError(f"transform_with_state: time_mode={time_mode!r}; use None, 'processing_time' or 'event_time'")
        mode = {"none": None, "processingtime": "processing_time", "eventtime": "event_time"}.get(time_mode or "none", time_mode)
        keys = tuple(k for k in self._keys if isinstance(k, str))
        if len(keys) != len(self._keys):
            raise ValueError("transform_with_state: group by plain columns only")
        init, init_keys = None, keys
        if initial_state is not None:
            init, init_keys = _initial_state_node(initial_state, keys)
        return StreamFrame(n.TransformWithState(self._frame.node, keys, processor, parse_schema(output_schema),
                                                mode, output_mode, options, init, init_keys))

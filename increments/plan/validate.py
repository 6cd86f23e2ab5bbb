"""What streaming cannot do, refused before any batch runs (as Spark's UnsupportedOperationChecker).

Rules:
- output mode is append, update or complete;
- complete needs a streaming aggregation;
- sort only after an aggregation in complete mode; limit only in complete mode;
- append with an aggregation needs a watermark on the grouping's event-time column (a window
  over a watermarked column, or a watermarked plain key); the error names the fix;
- several stateful operators (aggregations, stream-stream joins, dedup) may be chained in append
  mode only, as in Spark 3.5+; in update and complete mode at most one streaming aggregation;
- transform_with_state's own output mode must match the query's (append/update);
- node rules (check_node): a join's left side is the stream, and a stream-static join is inner,
  left outer or left semi (the static side's unmatched rows are never final); a union's two
  sides are streams; transform_with_state is grouped, its processor is a StatefulProcessor, its
  output mode is append or update, and an initial state needs handle_initial_state; an aggregation groups by at most one F.window, and one with an
  F.session_window groups by it and plain columns only, in append or complete output mode (as
  Spark: no update mode for session windows).

validate() runs all of these before anything is built. The builders of Join, Union,
TransformWithState and Aggregate (with session windows) call check_node too, so a plan compiled
without validation (frame.schema, frame.explain()) is refused the same way.

The refusals that need the built inputs' schemas (a missing column, a non-TIMESTAMP event time,
a join condition that does not type-check, an outer join without watermarks and time bounds) are
raised by the builders (plan/compiler.py for the stateless nodes, the functions in
plan/builders.py for the others).
"""
from __future__ import annotations

from ..errors import AnalysisException
from ..functions import SessionWindowSpec, WindowSpec
from . import nodes as n

MODES = ("append", "update", "complete")


def validate(root: n.Node, output_mode: str) -> None:
    if output_mode not in MODES:
        raise AnalysisException(f"output mode {output_mode!r} is not one of {MODES}")
    if not n.is_streaming(root):
        raise AnalysisException("the query has no streaming source; use inc.read_stream.*(...)")
    aggs = [x for x in root.walk() if isinstance(x, n.Aggregate)]
    if len(aggs) > 1 and output_mode != "append":
        raise AnalysisException(f"multiple streaming aggregations are not supported in {output_mode} output mode: "
                                "chain them in append mode (with watermarks), aggregate once per query, or chain "
                                "two queries through a sink")
    if output_mode == "complete" and not aggs:
        raise AnalysisException("complete output mode is not supported when there are no streaming aggregations "
                                "on streaming DataFrames; use append or update")
    for node in root.walk():
        check_node(node, output_mode)
        if isinstance(node, n.Sort):
            below = [x for x in node.child.walk() if isinstance(x, n.Aggregate)]
            if not (below and output_mode == "complete"):
                raise AnalysisException("sorting is not supported on streaming frames, unless it is on an aggregated "
                                        "frame in complete output mode; sort the sink's table when reading it instead")
        if isinstance(node, n.Limit) and output_mode != "complete":
            raise AnalysisException(f"limit is not supported on streaming frames in {output_mode} output mode; "
                                    "use complete mode over an aggregation, or limit when reading the sink")
        if isinstance(node, n.TransformWithState) and output_mode == "complete":
            raise AnalysisException("transform_with_state does not support complete output mode; use append or update")
    if output_mode == "append":
        for agg in aggs:
            _check_append_aggregation(agg)


def check_node(node: n.Node, output_mode: str | None = None) -> None:
    """The refusals that need only this node and, when given, the query's output mode (not the
    inputs' schemas)."""
    if isinstance(node, n.Aggregate):
        _check_aggregate_keys(node, output_mode)
    if isinstance(node, n.Join):
        if not n.is_streaming(node.left):
            raise AnalysisException("join: the left side must be the stream; call stream.join(static, ...)")
        if not n.is_streaming(node.right) and node.how not in ("inner", "left_outer", "left_semi"):
            raise AnalysisException(f"join: {node.how} between a stream (left) and a static table (right) is not "
                                    "supported (the static side's unmatched rows are never final); use inner, "
                                    "left_outer or left_semi with the stream on the left")
    if isinstance(node, n.Union) and not (n.is_streaming(node.left) and n.is_streaming(node.right)):
        raise AnalysisException("union: both sides must be streams (a union of a stream and a static table is "
                                "not supported)")
    if isinstance(node, n.TransformWithState):
        if not node.keys:
            raise AnalysisException("transform_with_state needs group_by(<key columns>) first")
        if not callable(getattr(node.processor, "handle_input_rows", None)):
            raise AnalysisException("transform_with_state: the processor must be a StatefulProcessor "
                                    "(with handle_input_rows(key, rows, timer_values))")
        if node.output_mode not in ("append", "update"):
            raise AnalysisException(f"transform_with_state: output_mode {node.output_mode!r}; use 'append' or "
                                    "'update'")
        if node.initial_state is not None and not callable(getattr(node.processor, "handle_initial_state", None)):
            raise AnalysisException("transform_with_state: initial_state needs the processor to implement "
                                    "handle_initial_state(key, initial_state_row, timer_values)")


def _check_aggregate_keys(node: n.Aggregate, output_mode: str | None) -> None:
    if any(isinstance(k, SessionWindowSpec) for k in node.keys):
        where = "group_by(F.session_window(...)).agg"
        sessions = [k for k in node.keys if isinstance(k, SessionWindowSpec)]
        if len(sessions) > 1 or any(not isinstance(k, (str, SessionWindowSpec)) for k in node.keys):
            raise AnalysisException(f"{where}: group by one F.session_window(...) and plain columns only")
        if output_mode == "update":
            raise AnalysisException(
                "update output mode is not supported for session window aggregations (as in Spark): use append "
                "(with a watermark on the session column) or complete output mode")
    elif sum(isinstance(k, WindowSpec) for k in node.keys) > 1:
        raise AnalysisException("group_by(...).agg: group by at most one F.window(...)")


def _watermarked_columns(node: n.Node) -> set[str]:
    """The with_watermark columns that reach `node`: not past a map_in_arrow / map_in_pandas, whose
    output columns are new (as in Spark)."""
    if isinstance(node, n.WithWatermark):
        return {node.column} | _watermarked_columns(node.child)
    if getattr(node, "resets_watermarks", False):
        return set()
    return {c for child in node.children for c in _watermarked_columns(child)}


def _check_append_aggregation(agg: n.Aggregate) -> None:
    if any(isinstance(x, (n.Aggregate, n.Join, n.Deduplicate, n.TransformWithState)) for x in agg.child.walk()):
        return   # chained: the event-time column may come from the operator below (the builder checks it)
    marked = _watermarked_columns(agg.child)
    for k in agg.keys:
        col = k.column if isinstance(k, (WindowSpec, SessionWindowSpec)) else k
        if col in marked:
            return
    if any(getattr(x, "resets_watermarks", False) and any(isinstance(y, n.WithWatermark) for y in x.walk())
           for x in agg.child.walk()):
        raise AnalysisException(
            "append output mode is not supported for a streaming aggregation without a watermark on its event-time "
            "grouping: the with_watermark below map_in_arrow / map_in_pandas does not reach past it (its output "
            "columns are new, as in Spark); call .with_watermark(...) after the map_in_* step")
    raise AnalysisException(
        "append output mode is not supported for a streaming aggregation without a watermark on its event-time "
        "grouping: add .with_watermark(\"<event time column>\", \"<delay>\") before group_by and group by "
        "F.window(\"<event time column>\", ...), or use update or complete output mode")

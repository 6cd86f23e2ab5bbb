"""What streaming cannot do, refused before any batch runs (as Spark's UnsupportedOperationChecker).

Rules:
- output mode is append, update or complete;
- complete needs a streaming aggregation;
- sort only after an aggregation in complete mode; limit only in complete mode;
- append with an aggregation needs a watermark on the grouping's event-time column (a window
  over a watermarked column, or a watermarked plain key); the error names the fix;
- several stateful operators (aggregations, stream-stream joins, dedup) may be chained in append
  mode only, as in Spark 3.5+; in update and complete mode at most one streaming aggregation;
- transform_with_state's own output mode must match the query's (append/update).
Join-specific rules (watermarks and time bounds for outer joins) are checked by the join builder.
"""
from __future__ import annotations

from ..errors import AnalysisException
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


def _watermarked_columns(node: n.Node) -> set[str]:
    return {x.column for x in node.walk() if isinstance(x, n.WithWatermark)}


def _check_append_aggregation(agg: n.Aggregate) -> None:
    from ..functions import SessionWindowSpec, WindowSpec
    if any(isinstance(x, (n.Aggregate, n.Join, n.Deduplicate, n.TransformWithState)) for x in agg.child.walk()):
        return   # chained: the event-time column may come from the operator below (the builder checks it)
    marked = _watermarked_columns(agg.child)
    for k in agg.keys:
        col = k.column if isinstance(k, (WindowSpec, SessionWindowSpec)) else k
        if col in marked:
            return
    raise AnalysisException(
        "append output mode is not supported for a streaming aggregation without a watermark on its event-time "
        "grouping: add .with_watermark(\"<event time column>\", \"<delay>\") before group_by and group by "
        "F.window(\"<event time column>\", ...), or use update or complete output mode")

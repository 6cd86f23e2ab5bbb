"""Which late-rows target (with_watermark(..., late_rows=...)) each stateful operator writes to.

A stateful operator sends the input rows it drops as late to the target of the with_watermark
node(s) below it (through any chain of operators: an aggregation after a join uses its inputs'
watermark nodes). A stream-stream join looks at each side separately ("left", "right"). Several
watermark nodes below one input must name one table (the same path) or none; two different tables
are refused at start, since a row could not say which one it belongs to.
"""
from __future__ import annotations

from typing import Any

from ..errors import AnalysisException
from ..operators.base import PhysicalOp
from ..operators.join import StreamStreamJoinOp
from ..operators.stateless import WatermarkOp


def _targets_below(op: PhysicalOp) -> list[Any]:
    found: dict[str, Any] = {}
    for x in op.walk():
        t = getattr(x, "late_rows", None) if isinstance(x, WatermarkOp) else None
        if t is not None:
            found.setdefault(getattr(t, "path", repr(t)), t)
    return list(found.values())


def _one(op: PhysicalOp, child: PhysicalOp, what: str) -> Any:
    ts = _targets_below(child)
    if len(ts) > 1:
        raise AnalysisException(
            f"{op.describe()}: {what} reaches with_watermark nodes with different late_rows tables "
            f"({', '.join(repr(t) for t in ts)}); give them the same inc.dead_letter.delta(path) or only one")
    return ts[0] if ts else None


def assign_late_rows(root: PhysicalOp) -> None:
    """Set op.late_targets = {side: target} on every stateful operator that has one."""
    for op in root.walk():
        if not op.stateful:
            continue
        if isinstance(op, StreamStreamJoinOp):
            sides = {"left": _one(op, op.children[0], "the left input"),
                     "right": _one(op, op.children[1], "the right input")}
        else:
            sides = {None: _one(op, c, "its input") for c in op.children[:1]}
        op.late_targets = {k: v for k, v in sides.items() if v is not None}

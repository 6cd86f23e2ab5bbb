"""Per-operator watermarks, as Spark 3.5+ propagates them (PropagateWatermarkSimulator).

The global watermark W_b is computed as before (watermark.py: min over the with_watermark nodes,
or max). Each stateful operator then runs with its own *input* watermark, derived from W_b by a
walk up the physical plan:

    with_watermark node          outputs W                        (offset 0)
    scan / static side           outputs nothing                  (offset None)
    stateless node (also union)  outputs the min of its inputs'   (the max offset; None ignored)
    stateful node                input  = min of its inputs'; output = op.output_watermark_offset(input):
                                 aggregation, dedup, session window: the input unchanged;
                                 stream-stream join: min of its state watermarks
                                 (e.g. W - 1 hour - 1 ms for a one-hour time bound)

Every derived watermark is W - offset, clamped at 0 (and 0 while W is 0). An operator drops late
rows with its input watermark of the previous batch and evicts with that of this batch
(operators/base.py: ctx.late_watermark(op), ctx.eviction_watermark(op)). Offsets are constants of
the plan, so the log only needs the global watermarks it already holds.
"""
from __future__ import annotations

from ..operators.base import PhysicalOp
from ..operators.stateless import WatermarkOp


def _combine(offsets: list[int | None]) -> int | None:
    known = [o for o in offsets if o is not None]
    return max(known) if known else None


def propagate(root: PhysicalOp) -> None:
    """Set input_watermark_offset_ms on every operator of the tree (post-order)."""

    def out(op: PhysicalOp) -> int | None:
        ins = [out(c) for c in op.children]
        if isinstance(op, WatermarkOp):
            op.input_watermark_offset_ms = _combine(ins)
            return 0
        inp = _combine(ins)
        op.input_watermark_offset_ms = inp
        if not op.stateful:
            return inp
        return op.output_watermark_offset(inp)
    out(root)

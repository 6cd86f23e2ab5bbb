"""The plan-to-operator boundary: the builder of every logical node that Compiler.build does not
build itself.

Compiler.build turns the stateless nodes into operators directly (source and static scans,
select / filter / with_column / sort / limit as SQL stages, alias, parse_json, with_watermark);
every other node type is built by the function this table names, imported explicitly from its
operator module. A builder is `builder(compiler, node) -> PhysicalOp`: it builds its inputs with
`compiler.build(child)`, takes a stable operator id with `compiler.next_operator_id(op)` when it
keeps state, and raises AnalysisException for what it refuses (the checks that need the built
inputs' schemas; the pure plan checks are in plan/validate.py).

A node type missing from this table and from Compiler.build is refused ("... is not supported on
streams yet"). plan/compiler.py imports this table at module level: no operator module imports
the compiler (the plan rewrites that build a sub-plan, plan/windows.py and plan/join_pushdown.py,
do it with type(compiler)).
"""
from __future__ import annotations

from typing import Any, Callable

from ..operators.aggregate import build_aggregate
from ..operators.apply_changes import build_apply_changes
from ..operators.base import PhysicalOp
from ..operators.dedup import build_dedup
from ..operators.expectations import build_expect
from ..operators.join import build_join
from ..operators.map_batches import build_map_batches
from ..operators.python_udf import build_drop_columns, build_udf_eval, build_udf_filter
from ..operators.transform_with_state import build as build_transform_with_state
from ..operators.union import build_union
from . import nodes as n
from .udf_nodes import DropColumns, MapBatches, UdfEval, UdfFilter

Builder = Callable[[Any, Any], PhysicalOp]

#: node type -> builder(compiler, node) -> PhysicalOp (exact type: subclasses are not looked up)
BUILDERS: dict[type, Builder] = {
    n.Aggregate: build_aggregate,
    n.ApplyChanges: build_apply_changes,
    n.Deduplicate: build_dedup,
    n.Expect: build_expect,
    n.Join: build_join,
    n.Union: build_union,
    MapBatches: build_map_batches,
    UdfEval: build_udf_eval,
    DropColumns: build_drop_columns,
    UdfFilter: build_udf_filter,
    n.TransformWithState: build_transform_with_state,
}

"""Union of two frames (UNION ALL), by position or by name, as Spark's union / unionByName.

Stateless: each batch's output is the rows of both inputs in that batch. The inputs keep their
own watermark nodes, so the global watermark is the min (or max) over them (watermark.py) and a
stateful operator above the union drops late rows and evicts with that one watermark
(plan/watermarks.py: the union's output watermark is the min of its inputs').
Types: DuckDB's UNION ALL decides the common type of each column (an INT beside a BIGINT is a
BIGINT); columns that cannot be unified are refused when the query starts.
"""
from __future__ import annotations

import pyarrow as pa

from ..errors import AnalysisException
from ..plan import nodes as n
from ..plan.validate import check_node
from ..sql import quote_ident, run_sql
from .base import BatchContext, PhysicalOp


class UnionOp(PhysicalOp):
    def __init__(self, left: PhysicalOp, right: PhysicalOp, by_name: bool, allow_missing: bool):
        ls, rs = left.schema, right.schema
        what = "union_by_name" if by_name else "union"
        if by_name:
            missing = [c for c in ls.names if c not in rs.names] + [c for c in rs.names if c not in ls.names]
            if missing and not allow_missing:
                raise AnalysisException(f"{what}: columns {missing} are not on both sides (left: {ls.names}, right: "
                                        f"{rs.names}); pass allow_missing_columns=True to fill them with NULL")
            names = list(ls.names) + [c for c in rs.names if c not in ls.names]

            def side(schema: pa.Schema) -> str:
                return ", ".join(quote_ident(c) if c in schema.names else f"NULL AS {quote_ident(c)}" for c in names)
            self.sql = f"SELECT {side(ls)} FROM __l UNION ALL SELECT {side(rs)} FROM __r"
        else:
            if len(ls) != len(rs):
                raise AnalysisException(f"{what}: the sides have {len(ls)} and {len(rs)} columns (left: {ls.names}, "
                                        f"right: {rs.names}); union needs the same number of columns, matched by "
                                        "position (use union_by_name to match them by name)")
            names = list(ls.names)
            rcols = ", ".join(f"{quote_ident(r)} AS {quote_ident(lname)}" for r, lname in zip(rs.names, names))
            self.sql = f"SELECT * FROM __l UNION ALL SELECT {rcols} FROM __r"
        try:
            schema = run_sql(self.sql, {"__l": ls.empty_table(), "__r": rs.empty_table()}).schema
        except Exception as e:
            raise AnalysisException(f"{what}: the columns cannot be unified: {e} (left: {ls}, right: {rs})") from e
        super().__init__([left, right], schema)
        self.by_name = by_name
        # event-time columns: the left's, then the right's (matched by name or position)
        etc = dict(left.event_time_cols)
        for i, c in enumerate(rs.names):
            out = c if by_name else names[i]
            if c in right.event_time_cols and out not in etc:
                etc[out] = right.event_time_cols[c]
        self.event_time_cols = {k: v for k, v in etc.items() if k in schema.names}

    def execute(self, ctx: BatchContext) -> pa.Table:
        left = self.children[0].execute(ctx)
        right = self.children[1].execute(ctx)
        if right.num_rows == 0:
            return _conform(left, self.schema, self.by_name)
        if left.num_rows == 0 and not self.by_name:
            return pa.Table.from_arrays(right.columns, names=self.schema.names).cast(self.schema)
        try:
            return run_sql(self.sql, {"__l": left, "__r": right}).cast(self.schema)
        except Exception as e:
            raise RuntimeError(ctx.where(f"{self.describe()} failed: {e}")) from e

    def describe(self) -> str:
        return "UnionByName" if self.by_name else "Union"


def _conform(table: pa.Table, schema: pa.Schema, by_name: bool) -> pa.Table:
    if table.schema == schema:
        return table
    cols = [table.column(f.name).cast(f.type) if f.name in table.schema.names else pa.nulls(table.num_rows, f.type)
            for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def build_union(compiler, node: n.Union) -> PhysicalOp:
    left, right = compiler.build(node.left), compiler.build(node.right)
    check_node(node)   # the plan-only refusals (plan/validate.py): for compiles that skip validate()
    return UnionOp(left, right, node.by_name, node.allow_missing_columns)

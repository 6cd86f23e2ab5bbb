"""The stream-static join: stateless (the right side is inc.read.delta / inc.read.files / a pyarrow
Table): inner, left outer (stream side preserved) and left semi. Each batch joins its rows against
the static side as read for that batch (a Delta table at its latest version), in one DuckDB query.
No state, no trailing batch (SEMANTICS.md rule 2). Built by join.build_join; the stream-stream join
is join.py.
"""
from __future__ import annotations

import pyarrow as pa

from ..errors import AnalysisException
from ..sql import quote_ident, run_sql
from .base import BatchContext, PhysicalOp
from .join_condition import JoinSpec
from .join_outputs import select_list


class StreamStaticJoinOp(PhysicalOp):
    """Stateless: every batch's stream rows joined with the static side read for that batch."""

    def __init__(self, stream: PhysicalOp, static: PhysicalOp, spec: JoinSpec, how: str):
        self.spec, self.how = spec, how
        kind = {"inner": "JOIN", "left_outer": "LEFT JOIN", "left_semi": "SEMI JOIN"}[how]
        la, ra = quote_ident(spec.left_alias), quote_ident(spec.right_alias)
        self.sql = f"SELECT {select_list(spec.out_exprs)} FROM __s AS {la} {kind} __t AS {ra} ON ({spec.condition})"
        try:
            schema = run_sql(self.sql, {"__s": stream.schema.empty_table(), "__t": static.schema.empty_table()}).schema
        except Exception as e:
            raise AnalysisException(f"join condition {spec.condition!r}: {e}") from e
        super().__init__([stream, static], schema)
        self.qualifiers = spec.qualifiers  # used by compiler._sql

    def execute(self, ctx: BatchContext) -> pa.Table:
        stream = self.children[0].execute(ctx)
        static = self.children[1].execute(ctx)
        try:
            return run_sql(self.sql, {"__s": stream, "__t": static}).cast(self.schema)
        except Exception as e:
            raise RuntimeError(ctx.where(f"{self.describe()} failed: {e}")) from e

    def describe(self) -> str:
        return f"StreamStaticJoin[{self.how}, {self.spec.condition}]"

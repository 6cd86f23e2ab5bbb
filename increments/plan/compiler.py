"""Compile a logical plan into physical operators for one output mode.

This module builds operators (the stateless nodes itself, the others through the table in
plan/builders.py), assigns stable operator ids (state/<id>/ in the checkpoint) and derives schemas
by running each SQL stage over an empty Arrow table, which also checks expressions up front.

Plan refusals (AnalysisException) are raised while compiling, before any batch runs: the rules
about the plan and its output mode are in plan/validate.py (run first, unless check=False); the
ones that need an input's schema (a missing column, an event time that is not a TIMESTAMP, an
expression that does not type-check) are raised while building, by this module or by the builders;
after building, plan/late_rows.py refuses ambiguous late-row targets. (Refusals of sink options, modes and
checkpoints are raised when the query starts: api/writer.py, execution/runtime.py,
execution/sink_factory.py, checkpoint/.)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .. import sql_tree
from ..errors import AnalysisException
from ..functions import window_time_source
from ..operators.base import PhysicalOp
from ..operators.join_outputs import qualify_sql
from ..operators.parse_json import ParseJsonOp
from ..operators.stateless import ScanOp, SqlOp, StaticScanOp, WatermarkOp
from ..sql import quote_ident, run_sql
from . import nodes as n
from . import validate
from .builders import BUILDERS
from .late_rows import assign_late_rows
from .pushdown import push_filters_below_watermarks, pushable_conjuncts
from .spark_sql import select_items, translate_expr, with_column_expr
from .watermarks import propagate


@dataclass
class CompiledPlan:
    root: PhysicalOp
    sources: list[Any]
    watermark_delays: dict[str, int]          # watermark id -> delay ms
    stateful_ops: list[PhysicalOp]
    output_mode: str
    warnings: list[str] = field(default_factory=list)
    #: source index -> filter conjuncts Spark would push into that file scan (plan/pushdown.py);
    #: the read step counts num_input_rows after them, as Spark's scan does
    scan_filters: dict[int, list[str]] = field(default_factory=dict)
    #: source index -> the only columns the query reads from that source (absent: all of them);
    #: a source that can read fewer columns does, and fills the others with nulls (prune_scans)
    scan_columns: dict[int, list[str]] = field(default_factory=dict)

    @property
    def has_watermark_eviction(self) -> bool:
        return any(op.evicts_by_watermark for op in self.stateful_ops)

    @property
    def output_schema(self) -> pa.Schema:
        return self.root.schema


class Compiler:
    def __init__(self, output_mode: str = "append", options: dict[str, Any] | None = None, check: bool = True):
        self.output_mode = output_mode
        self.options = options or {}
        self.check = check
        self.sources: list[Any] = []
        self.watermark_delays: dict[str, int] = {}
        self.stateful_ops: list[PhysicalOp] = []
        self.warnings: list[str] = []
        self.scan_filters: dict[int, list[str]] = {}
        self.expectation_names: set[str] = set()     # unique per query (operators/expectations.py)
        self._next_op = 0

    def compile(self, node: n.Node) -> CompiledPlan:
        if self.check:
            validate.validate(node, self.output_mode)
        node = push_filters_below_watermarks(node)
        root = self.build(node)
        propagate(root)
        assign_late_rows(root)
        return CompiledPlan(root, self.sources, self.watermark_delays, self.stateful_ops, self.output_mode, self.warnings,
                            self.scan_filters, prune_scans(root))

    # -- building -----------------------------------------------------------------------
    def next_operator_id(self, op: PhysicalOp) -> str:
        op.operator_id = str(self._next_op)
        self._next_op += 1
        self.stateful_ops.append(op)
        return op.operator_id

    def build(self, node: n.Node) -> PhysicalOp:
        if isinstance(node, n.SourceNode):
            idx = len(self.sources)
            self.sources.append(node.source)
            return ScanOp(idx, node.source.schema(), node.source.description, node.source)
        if isinstance(node, n.StaticNode):
            return StaticScanOp(node.loader, node.loader.schema())
        if isinstance(node, (n.Select, n.Filter, n.WithColumn, n.Sort, n.Limit)):
            return self._sql(node)
        if isinstance(node, n.Alias):
            child = self.build(node.child)
            child.alias = node.name
            return child
        if isinstance(node, n.ParseJson):
            return self._parse_json(node)
        if isinstance(node, n.WithWatermark):
            child = self.build(node.child)
            if node.column not in child.schema.names:
                raise AnalysisException(f"with_watermark: no column {node.column!r} (columns: {child.schema.names})")
            if not pa.types.is_timestamp(child.schema.field(node.column).type):
                raise AnalysisException(f"with_watermark: column {node.column!r} is {child.schema.field(node.column).type}, "
                                        "not a TIMESTAMP; declare it TIMESTAMP or cast it with with_column")
            wid = str(len(self.watermark_delays))
            self.watermark_delays[wid] = node.delay_ms
            op = WatermarkOp(child, node.column, node.delay_ms, wid)
            op.late_rows = node.late_rows
            return op
        builder = BUILDERS.get(type(node))
        if builder is None:
            raise AnalysisException(f"{type(node).__name__} is not supported on streams yet")
        return builder(self, node)

    def _sql(self, node: n.Node) -> PhysicalOp:
        child = self.build(node.child)  # type: ignore[attr-defined]
        if isinstance(node, n.Filter):
            self._note_scan_filter(node)
        quals = _qualifiers(child)
        if quals:  # `alias.column` references after alias() or a join (operators/join_outputs.py)
            node = _qualify(node, quals)
        stage, label = _stage(node, child.schema)
        if isinstance(child, SqlOp):
            stages, labels, base = child.stages + [stage], child.labels + [label], child.children[0]
        else:
            stages, labels, base = [stage], [label], child
        op = SqlOp(base, stages, pa.schema([]), labels)
        op.stage_exprs = (child.stage_exprs if isinstance(child, SqlOp) else []) + [_stage_exprs(node, child.schema)]
        op.schema = _empty_schema(op.sql, base.schema, label)
        op.event_time_cols = _derived_event_time_cols(node, child.event_time_cols, op.schema.names)
        if quals and isinstance(node, (n.Filter, n.WithColumn)):  # columns kept: so are their qualifiers
            op.qualifiers = quals
            if child.alias:
                op.alias = child.alias
        return op

    def _note_scan_filter(self, node: n.Filter) -> None:
        """A filter stacked right on a JSON/CSV file source is (partly) pushed into Spark's scan."""
        below = node.child
        while isinstance(below, n.Filter):
            below = below.child
        src = getattr(below, "source", None)
        if not isinstance(below, n.SourceNode) or getattr(src, "format", None) not in ("json", "csv"):
            return
        idx = next(i for i, s in enumerate(self.sources) if s is src)
        self.scan_filters.setdefault(idx, []).extend(pushable_conjuncts(node.condition))

    def _parse_json(self, node: n.ParseJson) -> PhysicalOp:
        child = self.build(node.child)
        if node.column not in child.schema.names:
            raise AnalysisException(f"parse_json: no column {node.column!r} (columns: {child.schema.names})")
        for k in node.keep:
            if k not in child.schema.names:
                raise AnalysisException(f"parse_json: keep column {k!r} not found (columns: {child.schema.names})")
        fields = [pa.field(f.name, f.arrow_type) for f in node.schema.fields]
        fields += [child.schema.field(k) for k in node.keep]
        return ParseJsonOp(child, node.schema, node.column, node.keep, node.dead_letter, pa.schema(fields))


def _qualifiers(op: PhysicalOp) -> dict[str, dict[str, str]] | None:
    quals = op.qualifiers
    if quals is None and op.alias:
        quals = {op.alias: {c: c for c in op.schema.names}}
    return quals


def _qualify(node: n.Node, quals: dict[str, dict[str, str]]) -> n.Node:
    if isinstance(node, n.Select):
        return dataclasses.replace(node, exprs=tuple(qualify_sql(e, quals, as_select=True) for e in node.exprs))
    if isinstance(node, n.Filter):
        return dataclasses.replace(node, condition=qualify_sql(node.condition, quals))
    if isinstance(node, n.WithColumn):
        return dataclasses.replace(node, expr=qualify_sql(node.expr, quals))
    return node


def _stage(node: n.Node, schema: pa.Schema):
    if isinstance(node, n.Select):
        # a bare column name is quoted: `window`, `count`, `order` are SQL keywords a PySpark user
        # names without quotes (select("window", "count"))
        # Spark's spelling of nested access and generators (plan/spark_sql.py)
        exprs = ", ".join(select_items(node.exprs, schema))
        as_written = ", ".join(quote_ident(e) if e in schema.names else e for e in node.exprs)
        return (lambda rel, e=exprs: f"SELECT {e} FROM {rel} AS __in"), f"Project[{as_written}]"
    if isinstance(node, n.Filter):
        cond = translate_expr(node.condition, schema)
        return (lambda rel, c=cond: f"SELECT * FROM {rel} AS __in WHERE {c}"), f"Filter[{node.condition}]"
    if isinstance(node, n.WithColumn):
        name, e = quote_ident(node.name), with_column_expr(node.name, node.expr, schema)
        if node.name in schema.names:
            return (lambda rel: f"SELECT * REPLACE (({e}) AS {name}) FROM {rel} AS __in"), f"WithColumn[{node.name}]"
        return (lambda rel: f"SELECT *, ({e}) AS {name} FROM {rel} AS __in"), f"WithColumn[{node.name}]"
    if isinstance(node, n.Sort):
        order = ", ".join(node.exprs)
        return (lambda rel: f"SELECT * FROM {rel} AS __in ORDER BY {order}"), f"Sort[{order}]"
    if isinstance(node, n.Limit):
        return (lambda rel: f"SELECT * FROM {rel} AS __in LIMIT {node.n}"), f"Limit[{node.n}]"
    raise AssertionError(node)


def _stage_exprs(node: n.Node, schema: pa.Schema) -> list[tuple[str, str]]:
    """("column" or "filter", SQL expression) of each expression a stage computes (SqlOp.stage_exprs)."""
    if isinstance(node, n.Select):
        return [("column", quote_ident(e) if e in schema.names else e) for e in node.exprs]
    if isinstance(node, n.WithColumn):
        return [("column", f"({node.expr}) AS {quote_ident(node.name)}")]
    if isinstance(node, n.Filter):
        return [("filter", node.condition)]
    return []


def _derived_event_time_cols(node: n.Node, cols: dict, names: list[str]) -> dict:
    """Event-time columns after a stateless stage: kept by name; a plain reference to one or
    F.window_time(<window>) of one, named by with_column or `AS`, is one too (Spark keeps the
    watermark metadata on both)."""
    out = {k: v for k, v in cols.items() if k in names}
    pairs = []
    if isinstance(node, n.WithColumn):
        pairs.append((node.name, node.expr))
    elif isinstance(node, n.Select):
        pairs += [named for e in node.exprs if (named := sql_tree.aliased(e)) is not None]
    for name, expr in pairs:
        src = window_time_source(expr)
        if src is None:
            src = sql_tree.bare_name(expr)
        if src in cols and name in names:
            out[name] = cols[src]
    return out


def _empty_schema(sql: str, input_schema: pa.Schema, label: str) -> pa.Schema:
    try:
        return run_sql(sql, {"__in": input_schema.empty_table()}).schema
    except Exception as e:
        raise AnalysisException(f"{label}: {e} (input columns: {input_schema.names})") from e


def prune_scans(root: PhysicalOp) -> dict[int, list[str]]:
    """The columns each streaming scan must produce, walking down from the output (which needs all
    of its columns). Conservative: an operator that does not override PhysicalOp.columns_read
    (`columns_read(needed) -> set | None`, None meaning every input column) needs all of its
    input; so only chains like scan -> with_watermark -> group_by(...).agg(...) are pruned."""
    out: dict[int, list[str]] = {}

    def walk(op: PhysicalOp, needed: set[str] | None) -> None:
        if isinstance(op, ScanOp):
            if needed is not None and set(op.schema.names) - needed:
                out[op.source_index] = [c for c in op.schema.names if c in needed]
            return
        child_needed = op.columns_read(needed) if len(op.children) == 1 else None
        for c in op.children:
            walk(c, child_needed)
    walk(root, None)
    return out


def output_schema(node: n.Node) -> pa.Schema:
    return Compiler(check=False).compile(node).root.schema


def explain(node: n.Node) -> str:
    plan = Compiler(check=False).compile(node)
    lines: list[str] = []

    def rec(op: PhysicalOp, depth: int) -> None:
        lines.append("  " * depth + op.describe())
        for c in op.children:
            rec(c, depth + 1)
    rec(plan.root, 0)
    return "\n".join(lines)

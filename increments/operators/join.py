"""Joins: stream-static (stateless) and stream-stream (symmetric hash join over the state store).

Stream-static (the right side is inc.read.delta / inc.read.files / a pyarrow Table): inner, left
outer (stream side preserved) and left semi. Each batch joins its rows against the static side as
read for that batch (a Delta table at its latest version), in one DuckDB query. No state, no
trailing batch (SEMANTICS.md rule 2).

Stream-stream (both sides streaming): inner, left/right/full outer, left semi. Per batch b:

    drop rows of each watermarked side with event time <= WL_b        (counted as dropped)
    key text + partition (md5_number(key text) % partitions) of every new row, in DuckDB
    load the stored rows of both sides whose key occurs among the new rows (prefix scans)
    pairs = (stored + new) x (stored + new) matching the condition, minus stored x stored  (DuckDB)
    left semi: emit left rows in a pair that never matched before; outer: mark matched rows
    store the new rows, except those already behind their side's state watermark
    evict rows with t <= W_b + offset (state watermark from the condition, join_condition.py);
    an outer-preserved row evicted (or never stored) unmatched is emitted once with NULLs

Without both watermarks and a two-sided time bound the state is unbounded: outer and semi joins
are refused when the query starts, inner joins run and warn in every progress report and the log.
Recovery: all state writes go to the stores opened at N-1 and are committed as N by the engine;
row keys are (batch id, row number), so a redo of N rewrites exactly the same keys.
"""
from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np
import pyarrow as pa

from ..errors import AnalysisException
from ..plan import nodes as n
from ..plan.compiler import register
from ..sql import quote_ident, run_sql
from . import join_state as js
from .base import BatchContext, PhysicalOp
from .join_condition import JoinSpec, Side, analyse, select_list

log = logging.getLogger("increments.join")
OUTER_LEFT = ("left_outer", "full_outer")
OUTER_RIGHT = ("right_outer", "full_outer")


@register(n.Join)
def build_join(compiler, node: n.Join) -> PhysicalOp:
    left, right = compiler.build(node.left), compiler.build(node.right)
    if not n.is_streaming(node.left):
        raise AnalysisException("join: the left side must be the stream; call stream.join(static, ...)")
    ls = Side(left.schema, getattr(left, "alias", None), dict(left.event_time_cols))
    rs = Side(right.schema, getattr(right, "alias", None), dict(right.event_time_cols))
    if not n.is_streaming(node.right):
        if node.how not in ("inner", "left_outer", "left_semi"):
            raise AnalysisException(f"join: {node.how} between a stream (left) and a static table (right) is not "
                                    "supported (the static side's unmatched rows are never final); use inner, "
                                    "left_outer or left_semi with the stream on the left")
        return StreamStaticJoinOp(left, right, analyse(node.on, node.how, ls, rs, require_equality=False), node.how)
    op = StreamStreamJoinOp(left, right, analyse(node.on, node.how, ls, rs), node.how, ls, rs)
    compiler.next_operator_id(op)
    if op.unbounded_reason:
        compiler.warnings.append(op.unbounded_reason)
        log.warning("%s", op.unbounded_reason)
    return op


def _with_qualifiers(op: PhysicalOp, spec: JoinSpec) -> None:
    op.qualifiers = spec.qualifiers  # type: ignore[attr-defined]  # used by compiler._sql


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
        _with_qualifiers(self, spec)

    def execute(self, ctx: BatchContext) -> pa.Table:
        stream = self.children[0].execute(ctx)
        static = self.children[1].execute(ctx)
        try:
            return run_sql(self.sql, {"__s": stream, "__t": static}).cast(self.schema)
        except Exception as e:
            raise RuntimeError(ctx.where(f"{self.describe()} failed: {e}")) from e

    def describe(self) -> str:
        return f"StreamStaticJoin[{self.how}, {self.spec.condition}]"


class StreamStreamJoinOp(PhysicalOp):
    stateful = True
    operator_name = "symmetricHashJoin"

    def __init__(self, left: PhysicalOp, right: PhysicalOp, spec: JoinSpec, how: str, ls: Side, rs: Side):
        self.spec, self.how, self.ls, self.rs = spec, how, ls, rs
        la, ra = quote_ident(spec.left_alias), quote_ident(spec.right_alias)
        self.la, self.ra = la, ra
        outs = spec.left_out if how == "left_semi" else spec.out_exprs
        self.pairs_sql = (f"SELECT {la}.__rid AS __lrid, {ra}.__rid AS __rrid"
                          + ("" if how == "left_semi" else f", {select_list(outs)}")
                          + f" FROM __al AS {la} JOIN __ar AS {ra} ON ({spec.condition}) WHERE {la}.__new OR {ra}.__new")
        self.semi_sql = (f"SELECT {select_list(outs)} FROM __al AS {la} WHERE NOT {la}.__m AND "
                         f"{la}.__rid IN (SELECT __lrid FROM __pairs)")
        self.null_left_sql = (f"SELECT {select_list(outs)} FROM __nl AS {la} LEFT JOIN "
                              f"(SELECT * FROM __ar LIMIT 0) AS {ra} ON false")
        self.null_right_sql = (f"SELECT {select_list(outs)} FROM (SELECT * FROM __al LIMIT 0) AS {la} "
                               f"RIGHT JOIN __nr AS {ra} ON false")
        empty = {"__al": _annotate(ls.schema.empty_table(), 0, [], 0), "__ar": _annotate(rs.schema.empty_table(), 0, [], 0)}
        try:
            if how == "left_semi":
                schema = run_sql(self.semi_sql, {**empty, "__pairs": run_sql(self.pairs_sql, empty)}).schema
            else:
                schema = run_sql(self.pairs_sql, empty).schema
                schema = pa.schema([f for f in schema if f.name not in ("__lrid", "__rrid")])
        except Exception as e:
            raise AnalysisException(f"join condition {spec.condition!r}: {e}") from e
        super().__init__([left, right], schema)
        _with_qualifiers(self, spec)
        self.offsets = spec.state_offsets          # side -> (time column, offset ms)
        self.evicts_by_watermark = bool(self.offsets)
        self.unbounded_reason = self._unbounded_reason()
        if self.unbounded_reason and how != "inner":
            raise AnalysisException(f"{how} stream-stream join refused: {self.unbounded_reason}")

    # -- compile-time checks ---------------------------------------------------------------------
    def _unbounded_reason(self) -> str:
        missing = []
        if not self.ls.watermarked:
            missing.append("the left side has no watermark (add .with_watermark(\"<event time>\", \"<delay>\") to it)")
        if not self.rs.watermarked:
            missing.append("the right side has no watermark (add .with_watermark(\"<event time>\", \"<delay>\") to it)")
        if self.ls.watermarked and self.rs.watermarked:
            for side in ("left", "right"):
                if side not in self.offsets:
                    missing.append(f"the condition does not bound the {side} side's event time against the other "
                                   "side's (e.g. \"r.t BETWEEN l.t AND l.t + INTERVAL 1 HOUR\")")
                    break
        if not missing:
            return ""
        return ("join state is unbounded (it grows with all traffic and is never evicted): " + "; ".join(missing))

    def state_schema(self) -> dict:
        return {"how": self.how, "left_keys": self.spec.left_keys, "right_keys": self.spec.right_keys,
                "left": [[f.name, str(f.type)] for f in self.ls.schema],
                "right": [[f.name, str(f.type)] for f in self.rs.schema]}

    def describe(self) -> str:
        return f"StreamingSymmetricHashJoin[{self.how}, {self.spec.condition}]"

    # -- one batch ---------------------------------------------------------------------------------
    def execute(self, ctx: BatchContext) -> pa.Table:
        new = {"left": self.children[0].execute(ctx).cast(self.ls.schema),
               "right": self.children[1].execute(ctx).cast(self.rs.schema)}
        dropped = 0
        for side in new:
            new[side], d = self._drop_late(new[side], side, ctx.late_watermark_ms)
            dropped += d
        ctx.count_dropped(self, dropped)
        if self.unbounded_reason:
            ctx.warnings.append(self.unbounded_reason)
        stores = ctx.stores(self)
        keys = {side: self._keys(new[side], side, len(stores)) for side in new}
        want: dict[int, set] = defaultdict(set)
        for side in new:
            for k, p in zip(keys[side][0], keys[side][1]):
                want[p].add(k)
        stored = {side: [] for side in new}
        for p, ks in sorted(want.items()):
            for side in new:
                stored[side].extend((p, *c) for c in js.candidates(stores[p], side, sorted(ks)))
        tables = {side: self._all_rows(side, stored[side], new[side]) for side in new}
        pairs = run_sql(self.pairs_sql, {"__al": tables["left"], "__ar": tables["right"]})
        matched = {"left": set(np.unique(pairs.column("__lrid").to_numpy()).tolist()),
                   "right": set(np.unique(pairs.column("__rrid").to_numpy()).tolist())}
        if self.how == "left_semi":
            parts = [run_sql(self.semi_sql, {"__al": tables["left"], "__pairs": pairs})]
        else:
            parts = [pairs.drop_columns(["__lrid", "__rrid"])]
        metrics = {"num_rows_updated": 0, "num_rows_removed": 0}
        counts = [js.read_counts(s) for s in stores]
        before = [list(c) for c in counts]
        unmatched = {}
        for si, side in enumerate(("left", "right")):
            unmatched[side] = self._update_side(ctx, stores, side, si, new[side], keys[side], stored[side],
                                                matched[side], counts, metrics)
        if self.how in OUTER_LEFT and unmatched["left"]:
            nl = js.rows_to_table(unmatched["left"], self.ls.schema)
            parts.append(run_sql(self.null_left_sql, {"__nl": nl, "__ar": tables["right"]}))
        if self.how in OUTER_RIGHT and unmatched["right"]:
            nr = js.rows_to_table(unmatched["right"], self.rs.schema)
            parts.append(run_sql(self.null_right_sql, {"__nr": nr, "__al": tables["left"]}))
        for p, (c, b) in enumerate(zip(counts, before)):
            if c != b:
                js.write_counts(stores[p], c)
        ctx.custom_metrics[self.operator_id] = {"num_rows_total": sum(sum(c) for c in counts), **metrics}
        return pa.concat_tables([t.cast(self.schema) for t in parts])

    def _drop_late(self, table: pa.Table, side: str, late_ms: int) -> tuple[pa.Table, int]:
        cols = (self.ls if side == "left" else self.rs).watermarked
        if not cols or table.num_rows == 0:
            return table, 0
        cond = " OR ".join(f"coalesce(epoch_us({quote_ident(c)}) <= {int(late_ms) * 1000}, false)" for c in cols)
        kept = run_sql(f"SELECT * FROM __e WHERE NOT ({cond})", {"__e": table}).cast(table.schema)
        return kept, table.num_rows - kept.num_rows

    def _keys(self, table: pa.Table, side: str, partitions: int) -> tuple[list, list, list]:
        """(key texts, partitions, event times µs) of the side's new rows, computed in DuckDB."""
        s = self.ls if side == "left" else self.rs
        exprs = self.spec.left_keys if side == "left" else self.spec.right_keys
        ktext = "concat_ws(chr(31), " + ", ".join(f"coalesce(CAST(({e}) AS VARCHAR), chr(0))" for e in exprs) + ")"
        tcol = self.offsets.get(side, (None,))[0]
        t = f"epoch_us({quote_ident(tcol)})" if tcol else "NULL::BIGINT"
        alias = f" AS {quote_ident(s.alias)}" if s.alias else ""
        out = run_sql(f"SELECT {ktext} AS k, CAST(md5_number({ktext}) % {partitions} AS BIGINT) AS p, {t} AS t "
                      f"FROM __e{alias}", {"__e": table})
        return out.column("k").to_pylist(), out.column("p").to_pylist(), out.column("t").to_pylist()

    def _all_rows(self, side: str, stored: list, new: pa.Table) -> pa.Table:
        schema = self.ls.schema if side == "left" else self.rs.schema
        old = js.rows_to_table([c[2] for c in stored], schema)
        return _annotate(pa.concat_tables([old, new]), len(stored), [c[3] for c in stored], new.num_rows)

    def _update_side(self, ctx, stores, side, si, new, keys, stored, matched, counts, metrics) -> list[tuple]:
        """Store new rows, mark matches, evict by the state watermark; return rows to emit with NULLs."""
        preserved = self.how in (OUTER_LEFT if side == "left" else OUTER_RIGHT)
        track = preserved or (self.how == "left_semi" and side == "left")
        off = self.offsets.get(side)
        sw_us = (ctx.watermark_ms + off[1]) * 1000 if off else None
        out: list[tuple] = []
        base = len(stored)
        texts, parts, times = keys
        for j, row in enumerate(js.table_rows(new)):
            m = (base + j) in matched
            t = times[j]
            if sw_us is not None and t is not None and t <= sw_us:
                if preserved and not m:
                    out.append(row)
                continue
            js.put_row(stores[parts[j]], side, texts[j], ctx.batch_id, j, row, m, t, sw_us is not None)
            counts[parts[j]][si] += 1
            metrics["num_rows_updated"] += 1
        if track:
            for rid, (p, skey, row, m, t) in enumerate(stored):
                if not m and rid in matched:
                    js.mark_matched(stores[p], skey, row, t)
        if sw_us is not None:
            for p, store in enumerate(stores):
                ev = js.evict(store, side, sw_us)
                counts[p][si] -= len(ev)
                metrics["num_rows_removed"] += len(ev)
                if preserved:
                    out.extend(row for row, m in ev if not m)
        return out


def _annotate(table: pa.Table, n_stored: int, stored_matched: list, n_new: int) -> pa.Table:
    """Add __rid (row number), __new and __m (matched before this batch) to a side's rows."""
    total = n_stored + n_new
    return (table.append_column("__rid", pa.array(np.arange(total, dtype=np.int64)))
            .append_column("__new", pa.array([False] * n_stored + [True] * n_new, pa.bool_()))
            .append_column("__m", pa.array(list(stored_matched) + [False] * n_new, pa.bool_())))

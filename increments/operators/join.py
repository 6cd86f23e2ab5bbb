"""Joins: the builder of both kinds, and the stream-stream join (symmetric hash join over the state
store). The stream-static join (stateless) is join_static.py.

Stream-stream (both sides streaming): inner, left/right/full outer, left semi. Per batch b, as
observed on Apache Spark 4.3.0 (tests/operators/test_join_spark_parity.py compares 53 scenarios
batch by batch; where SEMANTICS.md is silent or differs, Spark wins):

    (planning) one-sided conjuncts and inferred `col IS NOT NULL` go below the join into the sides
        that are not preserved, and from there into the scan (plan/join_pushdown.py); on a preserved side
        a one-sided conjunct is the pre-join filter: failing rows get their NULL row at once
    drop rows of each watermarked side with event time <= WL_b        (counted as dropped)
    key text + partition (md5_number(key text) % partitions: partitioning.md5_mod_sql) of every new row, in DuckDB
    load the stored rows of each side whose key occurs among the OTHER side's new rows (the only
        stored rows that can pair), from the stored chunks, which the operator keeps decoded in memory from the batch
        before when the store was loaded at exactly the state it committed (_take_mirrors), with a
        32-bit hash of each row's key text (memory only): a bitmap probe of the hashes, then the
        key texts of the rows it finds compared (join_state.KeyProbe, _candidates)
    pairs = (stored + new) x (stored + new) matching the condition (keys compared null-safely,
        as Spark's state does), minus stored x stored                                   (DuckDB)
    left semi: Spark looks up the new right rows first, then the new left rows against a right
        state holding only the new right rows not already behind the state watermark; a left row
        is emitted once and then leaves (or never enters) the state
    store the new rows: every left row (one behind its state watermark is stored and evicted again
        in this batch: counted in num_rows_updated and num_rows_removed), a right row when it is not
        behind its state watermark or, right/full outer, when it matched nothing
    evict rows with t <= W_b + offset (state watermark from the condition, join_condition.py);
    an outer-preserved row evicted unmatched is emitted once with NULLs

Without both watermarks and a two-sided time bound the state is unbounded: outer and semi joins
are refused when the query starts, inner joins run and warn in every progress report and the log.
Recovery: all state writes go to the stores opened at N-1 and are committed as N by the engine;
stored rows live in Arrow chunks keyed by (min event time, batch id) (join_state.py), every write a
deterministic function of version N-1 and the batch, so a redo of N rewrites exactly the same keys.
Per batch the side's chunks of every partition form one Arrow table (read from the store only
after a restart, a redo or a batch another runner committed; otherwise the chunks this operator
wrote, kept between batches), the candidates
(stored rows whose key occurs among the other side's new rows) selected by their key hashes and texts, and all state updates
(store, mark matched, semi deletions, eviction) are masks over Arrow/numpy arrays: no per-row Python.
"""
from __future__ import annotations


import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import AnalysisException
from ..plan import nodes as n
from ..plan.validate import check_node
from ..plan.join_pushdown import push_one_sided
from ..redaction import logger as redacting_logger
from ..sql import quote_ident, run_sql
from . import join_state as js
from .base import BatchContext, PhysicalOp
from .join_condition import JoinSpec, Side, analyse, event_time_us_sql
from .join_outputs import select_list
from .partitioning import md5_mod_sql
from .join_static import StreamStaticJoinOp

log = redacting_logger("increments.join")
OUTER_LEFT = ("left_outer", "full_outer")
OUTER_RIGHT = ("right_outer", "full_outer")


def build_join(compiler, node: n.Join) -> PhysicalOp:
    check_node(node)   # the stream on the left, the join types a stream-static join supports
    node, prefilter = push_one_sided(compiler, node)
    left, right = compiler.build(node.left), compiler.build(node.right)
    ls = Side(left.schema, left.alias, dict(left.event_time_cols))
    rs = Side(right.schema, right.alias, dict(right.event_time_cols))
    if not n.is_streaming(node.right):
        return StreamStaticJoinOp(left, right, analyse(node.on, node.how, ls, rs, require_equality=False), node.how)
    op = StreamStreamJoinOp(left, right, analyse(node.on, node.how, ls, rs), node.how, ls, rs, prefilter)
    compiler.next_operator_id(op)
    if op.unbounded_reason:
        compiler.warnings.append(op.unbounded_reason)
        log.warning("%s", op.unbounded_reason)
    return op


class StreamStreamJoinOp(PhysicalOp):
    stateful = True
    operator_name = "symmetricHashJoin"

    def __init__(self, left: PhysicalOp, right: PhysicalOp, spec: JoinSpec, how: str, ls: Side, rs: Side,
                 prefilter: dict[str, list[str]] | None = None):
        self.spec, self.how, self.ls, self.rs = spec, how, ls, rs
        la, ra = quote_ident(spec.left_alias), quote_ident(spec.right_alias)
        self.la, self.ra = la, ra
        self.pre_sql = {}
        for side, ref in (("left", la), ("right", ra)):
            terms = (prefilter or {}).get(side) or []
            if terms:
                cond = " AND ".join(f"({t})" for t in terms)
                self.pre_sql[side] = f"SELECT coalesce(({cond}), false) AS __pre FROM __e AS {ref}"
        outs = spec.left_out if how == "left_semi" else spec.out_exprs
        # Left semi (Spark 4.3, observed): the new right rows are looked up against the stored left rows
        # first, then the new left rows against the right state, which by then holds only the new right
        # rows that were kept (not already behind the state watermark): see __keep.
        where = (f"(NOT {la}.__new AND {ra}.__new) OR ({la}.__new AND (NOT {ra}.__new OR {ra}.__keep))"
                 if how == "left_semi" else f"{la}.__new OR {ra}.__new")
        self.pairs_sql = (f"SELECT {la}.__rid AS __lrid, {ra}.__rid AS __rrid"
                          + ("" if how == "left_semi" else f", {select_list(outs)}")
                          + f" FROM __al AS {la} JOIN __ar AS {ra} ON ({spec.null_safe_condition}) WHERE {where}")
        self.semi_sql = (f"SELECT {select_list(outs)} FROM __al AS {la} WHERE NOT {la}.__m AND "
                         f"{la}.__rid IN (SELECT __lrid FROM __pairs)")
        self.null_left_sql = (f"SELECT {select_list(outs)} FROM __nl AS {la} LEFT JOIN "
                              f"(SELECT * FROM __ar LIMIT 0) AS {ra} ON false")
        self.null_right_sql = (f"SELECT {select_list(outs)} FROM (SELECT * FROM __al LIMIT 0) AS {la} "
                               f"RIGHT JOIN __nr AS {ra} ON false")
        empty = {"__al": js.annotate(ls.schema.empty_table(), 0, [], 0), "__ar": js.annotate(rs.schema.empty_table(), 0, [], 0)}
        try:
            if how == "left_semi":
                schema = run_sql(self.semi_sql, {**empty, "__pairs": run_sql(self.pairs_sql, empty)}).schema
            else:
                schema = run_sql(self.pairs_sql, empty).schema
                schema = pa.schema([f for f in schema if f.name not in ("__lrid", "__rrid")])
        except Exception as e:
            raise AnalysisException(f"join condition {spec.condition!r}: {e}") from e
        super().__init__([left, right], schema)
        self.qualifiers = spec.qualifiers  # used by compiler._sql
        self.offsets = spec.state_offsets          # side -> (time column, offset ms)
        self.evicts_by_watermark = bool(self.offsets)
        self.unbounded_reason = self._unbounded_reason()
        self._probe = js.KeyProbe()        # its bitmaps are kept between batches (execute runs one batch at a time)
        if self.unbounded_reason and how != "inner":
            raise AnalysisException(f"{how} stream-stream join refused: {self.unbounded_reason}")

    def output_watermark_offset(self, input_offset_ms: int | None) -> int | None:
        """Spark (StreamingSymmetricHashJoinExec.produceOutputWatermark): the min of the two state
        watermarks, e.g. W - 1 hour - 1 ms after `r.t BETWEEN l.t AND l.t + INTERVAL 1 HOUR`; no state
        watermark, no output watermark."""
        if input_offset_ms is None or not self.offsets:
            return None
        return input_offset_ms + max(-off for _, off in self.offsets.values())

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
        # "layout" is fixed in the checkpoint's conf.json: a checkpoint written with the earlier row-per-key
        # layout (no "layout") is refused at start (IncompatibleCheckpointError) instead of misread.
        return {"how": self.how, "layout": js.LAYOUT, "left_keys": self.spec.left_keys, "right_keys": self.spec.right_keys,
                "left": [[f.name, str(f.type)] for f in self.ls.schema],
                "right": [[f.name, str(f.type)] for f in self.rs.schema]}

    def state_functions(self) -> list[str]:
        """The join condition (its time bound decides what the state keeps), spaces normalized."""
        return [f"condition: {' '.join(str(self.spec.condition).split())}"]

    def describe(self) -> str:
        return f"StreamingSymmetricHashJoin[{self.how}, {self.spec.condition}]"

    # -- one batch ---------------------------------------------------------------------------------
    def execute(self, ctx: BatchContext) -> pa.Table:
        new = {"left": self.children[0].execute(ctx).cast(self.ls.schema),
               "right": self.children[1].execute(ctx).cast(self.rs.schema)}
        dropped, late = 0, []
        for side in new:
            new[side], gone = self._drop_late(new[side], side, ctx.late_watermark(self))
            dropped += gone.num_rows
            late.append((side, gone))
        ctx.count_dropped(self, dropped)
        ctx.route_late(self, late, ctx.late_watermark(self))
        failed = {}
        for side, sql in self.pre_sql.items():   # pre-join filter: neither stored nor joined
            if new[side].num_rows:
                mask = run_sql(sql, {"__e": new[side]}).column("__pre")
                failed[side] = new[side].filter(pc.invert(mask))
                new[side] = new[side].filter(mask)
        if self.unbounded_reason:
            ctx.warnings.append(self.unbounded_reason)
        stores = ctx.stores(self)
        keys = {side: self._keys(new[side], side, len(stores)) for side in new}
        # a stored row can only pair with a new row of the other side (stored x stored and a side with
        # itself never pair): its candidates are the stored rows whose key occurs among the OTHER side's
        # new rows -- about half the rows a union of both sides' keys selects
        other = {"left": "right", "right": "left"}
        sw_us = {side: self._state_watermark_us(side, ctx) for side in new}
        mirrors = self._take_mirrors(stores)
        full, cand, old, chunk_keys, where = {}, {}, {}, {}, {}
        for side in new:
            schema = self.ls.schema if side == "left" else self.rs.schema
            chunk_keys[side], where[side], parts_, hashes, row0 = [], [], [], [], 0
            for p, store in enumerate(stores):
                ks, t, mirrors[p][side], starts, h = js.load(store, side, schema, mirrors[p][side])
                chunk_keys[side].append(ks)
                ends = starts[1:] + [t.num_rows]
                where[side].append([(row0 + a, b - a) for a, b in zip(starts, ends)])   # chunk c: (first row, rows)
                row0 += t.num_rows
                parts_.append(t)
                hashes += h
            full[side] = pa.concat_tables(parts_)
            cand[side], old[side] = self._candidates(full[side], hashes, keys[other[side]], schema)
        keep = {side: ~js.behind_mask(keys[side][2], sw_us[side]) for side in new}
        tables = {side: self._all_rows(side, old[side], cand[side], new[side], keep[side]) for side in new}
        pairs = run_sql(self.pairs_sql, {"__al": tables["left"], "__ar": tables["right"]})
        matched = {}
        for side, col in (("left", "__lrid"), ("right", "__rrid")):
            m = np.zeros(tables[side].num_rows, dtype=bool)
            m[pairs.column(col).to_numpy()] = True
            matched[side] = m
        if self.how == "left_semi":
            parts = [run_sql(self.semi_sql, {"__al": tables["left"], "__pairs": pairs})]
        else:
            parts = [pairs.drop_columns(["__lrid", "__rrid"])]
        metrics = {"num_rows_updated": 0, "num_rows_removed": 0}
        counts = [js.read_counts(s) for s in stores]
        before = [list(c) for c in counts]
        unmatched = {}
        for si, side in enumerate(("left", "right")):
            unmatched[side] = self._update_side(ctx, stores, side, si, new[side], keys[side], full[side], cand[side],
                                                chunk_keys[side], matched[side], counts, metrics,
                                                [m[side] for m in mirrors], where[side],
                                                tables[side].column("__m").to_numpy(zero_copy_only=False)[:len(cand[side])])
        if self.how in OUTER_LEFT and failed.get("left") is not None and failed["left"].num_rows:
            parts.append(run_sql(self.null_left_sql, {"__nl": failed["left"], "__ar": tables["right"]}))
        if self.how in OUTER_RIGHT and failed.get("right") is not None and failed["right"].num_rows:
            parts.append(run_sql(self.null_right_sql, {"__nr": failed["right"], "__al": tables["left"]}))
        if self.how in OUTER_LEFT and unmatched["left"].num_rows:
            parts.append(run_sql(self.null_left_sql, {"__nl": unmatched["left"], "__ar": tables["right"]}))
        if self.how in OUTER_RIGHT and unmatched["right"].num_rows:
            parts.append(run_sql(self.null_right_sql, {"__nr": unmatched["right"], "__al": tables["left"]}))
        for p, (c, b) in enumerate(zip(counts, before)):
            if c != b:
                js.write_counts(stores[p], c)
        ctx.custom_metrics.setdefault(self.operator_id, {}).update(num_rows_total=sum(sum(c) for c in counts), **metrics)
        result = pa.concat_tables([t.cast(self.schema) for t in parts])
        self._keep_mirrors(stores, mirrors, ctx.batch_id)
        return result

    # -- the stored chunks kept between batches ------------------------------------------------------
    def _take_mirrors(self, stores) -> list[dict]:
        """Per partition, the decoded chunks of both sides as this operator wrote them in the batch
        before (join_state.Mirror), when the store was loaded at exactly that state: the same
        version and the token that this operator's store got when it committed it (a redo, a
        batch another runner committed, or a store loaded from the checkpoint: None, read from
        the store). Taken, not shared: a batch that fails leaves nothing kept."""
        kept, self._mirrors = getattr(self, "_mirrors", {}), {}
        out = []
        for p, store in enumerate(stores):
            k = kept.get(p)
            ok = (k is not None and getattr(store, "token", None) and getattr(store, "version", None) == k["version"]
                  and k["store"].version == k["version"] and k["store"].token == store.token)
            out.append(k["sides"] if ok else {"left": None, "right": None})
        return out

    def _keep_mirrors(self, stores, mirrors: list[dict], batch_id: int) -> None:
        """Keep the batch's chunks for the next batch (valid only if these stores commit batch_id)."""
        self._mirrors = {p: {"store": store, "version": int(batch_id), "sides": mirrors[p]}
                         for p, store in enumerate(stores) if getattr(store, "version", None) is not None}

    def _drop_late(self, table: pa.Table, side: str, late_ms: int) -> tuple[pa.Table, pa.Table]:
        """(rows kept, rows dropped as late) of one side's new rows."""
        cols = (self.ls if side == "left" else self.rs).watermarked
        if not cols or table.num_rows == 0:
            return table, table.slice(0, 0)
        schema = (self.ls if side == "left" else self.rs).schema
        cond = " OR ".join(f"coalesce({event_time_us_sql(c, schema)} <= {int(late_ms) * 1000}, false)" for c in cols)
        late = run_sql(f"SELECT ({cond}) AS __late FROM __e", {"__e": table}).column(0)
        if not (pc.sum(late).as_py() or 0):
            return table, table.slice(0, 0)
        return table.filter(pc.invert(late)), table.filter(late)

    def _keys(self, table: pa.Table, side: str, partitions: int) -> tuple[pa.Array, np.ndarray, pa.Array, np.ndarray]:
        """(key texts, partitions, event times µs, key hashes (join_state.key_hashes)) of the side's
        new rows, computed in DuckDB."""
        s = self.ls if side == "left" else self.rs
        exprs = self.spec.left_keys if side == "left" else self.spec.right_keys
        ktext = "concat_ws(chr(31), " + ", ".join(f"coalesce(CAST(({e}) AS VARCHAR), chr(0))" for e in exprs) + ")"
        tcol = self.offsets.get(side, (None,))[0]
        t = event_time_us_sql(tcol, s.schema) if tcol else "NULL::BIGINT"
        alias = f" AS {quote_ident(s.alias)}" if s.alias else ""
        # the key text once, in a subquery (the statement's parse is a visible part of a batch's cost)
        out = run_sql(f"SELECT k, CAST({md5_mod_sql('k', partitions)} AS BIGINT) AS p, t, {js.key_hash_sql('k')} AS h "
                      f"FROM (SELECT {ktext} AS k, {t} AS t FROM __e{alias})", {"__e": table})
        return (out.column("k").combine_chunks().cast(pa.string()),
                out.column("p").to_numpy().astype(np.int64), out.column("t").combine_chunks().cast(pa.int64()),
                out.column("h").to_numpy().astype(np.uint32))

    def _candidates(self, full: pa.Table, hashes: list[np.ndarray], want_keys, schema: pa.Schema
                    ) -> tuple[np.ndarray, pa.Table]:
        """(ascending row numbers of `full`, their rows: the side's columns + __m) of the stored rows whose
        key text occurs among `want_keys` (the other side's new rows' (texts, partitions, times,
        hashes)): the rows whose key hash may be wanted (join_state.KeyProbe over each chunk's
        hashes, which the mirror keeps: the stored key texts are not hashed per batch), then their
        texts compared."""
        texts, hashes_want = want_keys[0], want_keys[3]
        cand = self._probe.rows(hashes, hashes_want)
        if len(cand):
            k = js.take_sorted(full.select(["__k"]), cand).column(0)
            exact = pc.is_in(k, value_set=pc.unique(texts)).to_numpy(zero_copy_only=False)
            if not exact.all():
                cand = cand[exact]
        # only the columns the join reads: the key texts and the rest are not gathered. take_sorted (a
        # take per chunk), not Arrow's take of the table, which first copies every column's chunks into
        # one (O(state) memory traffic per batch: quicker alone, slower on a busy machine)
        return cand, js.take_sorted(full.select(schema.names + ["__m"]), cand)

    def _all_rows(self, side: str, old: pa.Table, cand: np.ndarray, new: pa.Table, keep: np.ndarray) -> pa.Table:
        schema = self.ls.schema if side == "left" else self.rs.schema
        return js.annotate(pa.concat_tables([old.select(schema.names).cast(schema), new]), len(cand),
                         old.column("__m").to_numpy(zero_copy_only=False), new.num_rows, keep)

    def _state_watermark_us(self, side: str, ctx) -> int | None:
        off = self.offsets.get(side)
        return (ctx.eviction_watermark(self) + off[1]) * 1000 if off else None

    def _update_side(self, ctx, stores, side, si, new, keys, full, cand, chunk_keys, matched, counts,
                     metrics, mirrors, where, stored_m) -> pa.Table:
        """Store new rows, mark matches, evict by the state watermark; return rows to emit with NULLs.

        Which new rows Spark 4.3 adds to state (and so counts in num_rows_updated), observed:
        every left row (one already behind the state watermark is added and evicted again at the end
        of the batch: counted as updated and removed), except in a left semi join a left row that
        matched (emitted, never stored); a right row only when it is not behind the state watermark,
        or, in a right/full outer join, when it matched nothing (added, then evicted with its NULL
        row: updated and removed). Vectorised: masks over the new rows; stored rows (`full`, every
        chunk of every partition) are touched by sorted row numbers: the candidates that matched,
        and for eviction only the chunks whose key (min event time) is at or before the state
        watermark; only chunks holding a changed row are rewritten."""
        schema = self.ls.schema if side == "left" else self.rs.schema
        preserved = self.how in (OUTER_LEFT if side == "left" else OUTER_RIGHT)
        track = preserved or (self.how == "left_semi" and side == "left")
        semi_left = self.how == "left_semi" and side == "left"
        sw_us = self._state_watermark_us(side, ctx)
        texts, parts, times, hashes = keys
        n_st = len(cand)
        m_new = matched[n_st:]
        consider = ~m_new if semi_left else np.ones(new.num_rows, dtype=bool)
        behind = js.behind_mask(times, sw_us)
        not_m_pres = (~m_new) if preserved else np.zeros(new.num_rows, dtype=bool)
        counted = consider & behind & ((side == "left") | not_m_pres)
        n = int(counted.sum())
        metrics["num_rows_updated"] += n
        metrics["num_rows_removed"] += n
        out = [new.filter(pa.array(consider & behind & not_m_pres))]
        store_mask = consider & ~behind
        if store_mask.any():
            rows = (new.append_column("__k", texts).append_column("__t", times)
                    .append_column("__m", pa.array(m_new, pa.bool_())))
            for p in np.unique(parts[store_mask]).tolist():
                sel = store_mask & (parts == p)
                js.put_chunk(stores[p], side, rows.filter(pa.array(sel)), ctx.batch_id, mirrors[p], hashes[sel])
                counts[p][si] += int(sel.sum())
            metrics["num_rows_updated"] += int(store_mask.sum())
        # stored rows: matches, semi deletions, eviction -- as sorted row numbers of `full`, so the
        # work follows the candidates and the chunks old enough to hold evictable rows, not the state
        chunks = [(p, c, first, n) for p, cs in enumerate(where) for c, (first, n) in enumerate(cs)]
        firsts = np.array([x[2] for x in chunks], dtype=np.int64)

        def by_partition(rows: np.ndarray) -> None:
            owner = np.searchsorted(firsts, rows, side="right") - 1
            for k, c in zip(*np.unique(owner, return_counts=True)):
                counts[chunks[int(k)][0]][si] -= int(c)
        none = np.empty(0, dtype=np.int64)
        hit = cand[matched[:n_st] & ~stored_m] if n_st else none
        removed, marked = (hit, none) if semi_left else ((none, hit) if track else (none, none))
        if semi_left:
            # Spark 4.3 (observed): a stored left row emitted by a left semi join leaves the state in
            # that batch (counted as removed); it can never be emitted again.
            metrics["num_rows_removed"] += len(hit)
            by_partition(hit)
        ev = none
        if sw_us is not None and full.num_rows:
            t = full.column("__t")
            found = []
            for (p, c, first, n) in chunks:
                if js.chunk_min_time(chunk_keys[p][c][0]) <= sw_us:    # holds a row at or before sw
                    late = pc.fill_null(pc.less_equal(t.slice(first, n), pa.scalar(int(sw_us), pa.int64())), False)
                    found.append(np.flatnonzero(late.to_numpy(zero_copy_only=False)) + first)
            ev = np.concatenate(found).astype(np.int64) if found else none
            if len(removed) and len(ev):
                ev = np.setdiff1d(ev, removed, assume_unique=True)
            if len(ev):
                by_partition(ev)
                metrics["num_rows_removed"] += len(ev)
                if preserved:
                    gone = js.take_sorted(full, ev)
                    m_ev = gone.column("__m").to_numpy(zero_copy_only=False) | np.isin(ev, marked, assume_unique=True)
                    out.append(gone.filter(pa.array(~m_ev)).select(schema.names).cast(schema))
        touched = np.union1d(np.union1d(removed, marked), ev).astype(np.int64)
        if len(touched):
            # only the chunks holding a changed row are rewritten, each from its own rows
            mi = full.schema.get_field_index("__m")
            owner = np.searchsorted(firsts, touched, side="right") - 1
            for k in np.unique(owner).tolist():
                p, c, first, n = chunks[k]
                rows = full.slice(first, n)
                m_local = rows.column("__m").to_numpy(zero_copy_only=False).copy()
                keep = np.ones(n, dtype=bool)
                for idx, apply in ((marked, "m"), (removed, "k"), (ev, "k")):
                    lo, hi = np.searchsorted(idx, [first, first + n])
                    if hi > lo:
                        if apply == "m":
                            m_local[idx[lo:hi] - first] = True
                        else:
                            keep[idx[lo:hi] - first] = False
                rows = rows.set_column(mi, "__m", pa.array(m_local, pa.bool_())).filter(pa.array(keep))
                skey, batch_id = chunk_keys[p][c]
                kept_h = mirrors[p].hashes.get(skey)
                js.rewrite_chunk(stores[p], side, skey, batch_id, rows, mirrors[p],
                                 None if kept_h is None else kept_h[keep])
        return pa.concat_tables(out)


"""Session-window aggregation: group_by(F.session_window(col, gap), *keys) (SEMANTICS.md rule 5).

One batch:
    1. late rows: t + gap <= WL_b are dropped (append/update with a watermarked session column);
       counted per partial group (keys, t), as Spark's partial aggregation sees them
    2. each remaining row is a session [t, t+gap); rows with equal (keys, t) are pre-aggregated
    3. per touched key, the stored sessions (prefix scan on the key) and the new ones are merged in
       DuckDB (gaps and islands: a session merges into the previous one when start <= its end,
       touching sessions merge; a new row can bridge two stored sessions)
    4. every session of a touched key is put back; stored sessions that were merged away are
       deleted; update mode emits the sessions that changed
    5. eviction with W_b: sessions with end <= W_b are removed (append mode emits them), found
       by a range scan of an index store keyed (end_us, *keys, start_us)
State: primary store key (*keys, start_us) -> (end_us, *accumulators); the index lives in the
side stores state/<id>-byend/ (committed and aborted with the primary ones, so a redo of batch
N starts both from N-1). A row overlapping an already evicted session starts a new one.
"""
from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state.encoding import decode_key, decode_value, encode_key, encode_value

from ..errors import AnalysisException, ArithmeticOverflowError
from ..functions import SessionWindowSpec
from ..plan import validate
from ..sql import quote_ident, run_sql
from ..types import state_type_name
from .accumulators import Accumulators
from .base import BatchContext, PhysicalOp
from ..nested_order import min_max_sql
from .key_codec import columns_pylist, decode_rows, time_bound, to_arrays, window_struct
from .partitioning import partition_sql, split_by_partition
from .state_util import side_stores, write_schema_once

_MERGE_AGG = {"add": "sum({a})", "sum": "sum({a})", "min": "min({a})", "max": "max({a})",
              "first": "first({a} ORDER BY __ss, __src, __ord)", "last": "last({a} ORDER BY __ss, __src, __ord)"}


class SessionWindowOp(PhysicalOp):
    stateful = True

    def __init__(self, child: PhysicalOp, keys: tuple, aggs: tuple, mode: str):
        where = "group_by(F.session_window(...)).agg"
        cs = child.schema
        sessions = [k for k in keys if isinstance(k, SessionWindowSpec)]   # one, with plain keys: plan/validate.py
        self.spec: SessionWindowSpec = sessions[0]
        for k in keys:
            col = k.column if isinstance(k, SessionWindowSpec) else k
            if col not in cs.names:
                raise AnalysisException(f"{where}: no column {col!r} (columns: {cs.names})")
        if not pa.types.is_timestamp(cs.field(self.spec.column).type):
            raise AnalysisException(f"F.session_window({self.spec.column!r}): the column must be a TIMESTAMP")
        self.keys, self.mode = keys, mode
        self.plain = [k for k in keys if isinstance(k, str)]
        self.gap_us = self.spec.gap_ms * 1000
        self.watermarked = self.spec.column in child.event_time_cols
        self.acc = Accumulators(aggs, cs, where)
        ts = pa.timestamp("us", tz="UTC")
        fields = [pa.field(k.name, pa.struct([pa.field("start", ts), pa.field("end", ts)]))
                  if isinstance(k, SessionWindowSpec) else cs.field(k) for k in keys]
        super().__init__([child], pa.schema(fields + self.acc.out_fields))
        # the session window keeps its watermark for a chained operator downstream (Spark 3.5+)
        self.event_time_cols = ({self.spec.name: child.event_time_cols[self.spec.column]} if self.watermarked else {})
        self.key_columns = [k.name if isinstance(k, SessionWindowSpec) else k for k in keys]

    def key_fields(self) -> list[tuple[str, str]]:
        cs = self.children[0].schema
        return [(k, state_type_name(cs.field(k).type)) for k in self.plain] + [(f"{self.spec.name}_start", "TIMESTAMPTZ")]

    def value_fields(self) -> list[tuple[str, str]]:
        return [(f"{self.spec.name}_end", "TIMESTAMPTZ")] + self.acc.value_fields()

    def state_functions(self) -> list[str]:
        return self.acc.functions()

    def state_schema(self) -> dict[str, Any]:
        return {"key": self.key_fields(), "value": self.value_fields(), "session_gap_ms": self.spec.gap_ms}

    def describe(self) -> str:
        return f"SessionWindowStateStoreSave[{self.operator_name}, keys={self.key_columns}, mode={self.mode}]"

    # -- one batch ---------------------------------------------------------------------------
    def _partials(self, ctx: BatchContext, table: pa.Table, nparts: int) -> pa.Table:
        table = table.append_column("__rn", pa.array(np.arange(table.num_rows, dtype=np.int64)))
        keys = [quote_ident(k) for k in self.plain]
        g = ", ".join(keys + ["__t"])
        c = quote_ident(self.spec.column)
        try:
            out = run_sql(f"SELECT {g}, {self.acc.partial_sql()}, {partition_sql(keys, nparts)} AS __p, "
                          f"min(__rn) AS __ord FROM (SELECT *, epoch_us({c}) AS __t FROM __in WHERE {c} IS NOT NULL) "
                          f"GROUP BY {g}", {"__in": table})
        except duckdb.Error as e:
            overflow = self.acc.overflow_error(e)
            if overflow is None:
                raise
            raise self._overflow(ctx, overflow) from None
        if self.watermarked and self.mode != "complete":
            self._route_late(ctx, table)
        if self.watermarked and self.mode != "complete" and out.num_rows:
            late = pc.less_equal(pc.add(out.column("__t"), self.gap_us), ctx.late_watermark(self) * 1000)
            n_late = pc.sum(late).as_py() or 0
            if n_late:
                ctx.count_dropped(self, n_late)
                out = out.filter(pc.invert(late))
        return out

    def _overflow(self, ctx: BatchContext, e: ArithmeticOverflowError) -> ArithmeticOverflowError:
        return ArithmeticOverflowError(ctx.where(f"operator {self.operator_id}:{self.operator_name} "
                                                 f"(group_by(session_window, ...).agg): {e}"))

    def _route_late(self, ctx: BatchContext, table: pa.Table) -> None:
        """The input rows dropped as late (t + gap <= WL; null times are never late) to late_rows."""
        if not self.late_targets:
            return
        wl = ctx.late_watermark(self)
        t = table.column(self.spec.column).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        late = pc.fill_null(pc.less_equal(pc.add(t, self.gap_us), wl * 1000), False)
        ctx.route_late(self, [(None, table.filter(late))], wl)

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        stores = ctx.stores(self)
        index = side_stores(ctx, self, "byend")
        write_schema_once(self, ctx, self.key_fields(), self.value_fields())
        partials = self._partials(ctx, table, len(stores))
        out: list[tuple[list[tuple], list[int], list[int], list[pa.Array]]] = []
        for p, part in enumerate(split_by_partition(partials, len(stores))):
            if part.num_rows:
                changed = self._merge_partition(ctx, stores[p], index[p], part)
                if self.mode == "update":
                    out.append(changed)
            if self.watermarked and self.mode in ("append", "update"):
                evicted = self._evict(stores[p], index[p], ctx.eviction_watermark(self))
                if self.mode == "append":
                    out.append(evicted)
            if self.mode == "complete":
                keys, vals = decode_rows(stores[p].iter_all())
                out.append(self._rows(keys, vals))
        return self._result(out)

    def _merge_partition(self, ctx: BatchContext, store, index, part: pa.Table):
        """Merge the batch's sessions of each touched key with its stored ones; returns the changed."""
        kcols = columns_pylist(part, self.plain)
        row_keys = list(zip(*kcols)) if kcols else [()] * part.num_rows
        # keyed by the key's encoding: a STRUCT / list key (a dict / list value) is not hashable
        gid: dict[bytes, int] = {}
        uniq: list[tuple] = []
        row_gids = []
        for k in row_keys:
            kb = encode_key(k)
            g = gid.get(kb)
            if g is None:
                g = gid[kb] = len(uniq)
                uniq.append(k)
            row_gids.append(g)
        stored: dict[tuple[int, int], tuple] = {}    # (gid, start) -> (end, *accs)
        for g, k in enumerate(uniq):
            for kb, vb in store.prefix_scan(encode_key(k)):
                stored[(g, decode_key(kb)[-1])] = decode_value(vb)
        types = self.acc.types
        n_acc = len(types)
        new = {"__g": pa.array(row_gids, pa.int64()), "__ss": part.column("__t"),
               "__se": pa.compute.add(part.column("__t"), self.gap_us), "__src": pa.array([1] * part.num_rows, pa.int8()),
               "__ord": part.column("__ord")}
        for i in range(n_acc):
            new[f"__a{i}"] = part.column(f"__a{i}")
        cand = pa.table(new)
        if stored:
            items = list(stored.items())
            old = {"__g": pa.array([g for (g, _), _ in items], pa.int64()),
                   "__ss": pa.array([s for (_, s), _ in items], pa.int64()),
                   "__se": pa.array([v[0] for _, v in items], pa.int64()),
                   "__src": pa.array([0] * len(items), pa.int8()), "__ord": pa.array([0] * len(items), pa.int64())}
            for i, arr in enumerate(to_arrays([v for _, v in items], types, offset=1)):
                old[f"__a{i}"] = arr
            cand = pa.concat_tables([pa.table(old).cast(cand.schema), cand])
        aggs = ", ".join(f"{min_max_sql(kind, f'__a{i}', t) if kind in ('min', 'max') else _MERGE_AGG[kind].format(a=f'__a{i}')} AS __a{i}"
                         for i, (_, t, _, kind) in enumerate(self.acc.accs))
        merged = run_sql(
            "WITH s AS (SELECT *, max(__se) OVER (PARTITION BY __g ORDER BY __ss, __src, __ord ROWS BETWEEN UNBOUNDED "
            "PRECEDING AND 1 PRECEDING) AS __pe FROM __c), "
            "f AS (SELECT *, sum(CASE WHEN __pe IS NULL OR __ss > __pe THEN 1 ELSE 0 END) OVER (PARTITION BY __g "
            "ORDER BY __ss, __src, __ord ROWS UNBOUNDED PRECEDING) AS __sid FROM s) "
            f"SELECT __g, min(__ss) AS __ss, max(__se) AS __se, {aggs} FROM f GROUP BY __g, __sid", {"__c": cand})
        accs = []
        for i, t in enumerate(types):
            try:    # a merged integer sum is a HUGEINT: one beyond BIGINT's range fails the cast
                accs.append(merged.column(f"__a{i}").cast(t))
            except pa.ArrowInvalid:
                raise self._overflow(ctx, self.acc.overflow(i)) from None
        gs, ss, se = (merged.column(c).to_pylist() for c in ("__g", "__ss", "__se"))
        vals = list(zip(*[a.to_pylist() for a in accs]))
        keep: set[tuple[int, int]] = set()
        ch_keys, ch_end, ch_rows = [], [], []
        for i, (g, s, e) in enumerate(zip(gs, ss, se)):
            value = (e,) + tuple(vals[i])
            keep.add((g, s))
            before = stored.get((g, s))
            k = uniq[g]
            # Spark upserts every session of a touched key (counted as updated), changed or not
            store.put(encode_key(k + (s,)), encode_value(value))
            if before == value:
                continue
            if before is not None and before[0] != e:
                index.delete(encode_key((before[0],) + k + (s,)))
            if before is None or before[0] != e:
                index.put(encode_key((e,) + k + (s,)), b"")
            ch_keys.append(k + (s,)); ch_end.append(e); ch_rows.append(i)
        for (g, s), v in stored.items():
            if (g, s) not in keep:
                k = uniq[g]
                store.delete(encode_key(k + (s,)))
                index.delete(encode_key((v[0],) + k + (s,)))
        idx = pa.array(ch_rows, pa.int64())
        return ch_keys, ch_end, [a.take(idx) for a in accs]

    def _evict(self, store, index, watermark_ms: int):
        end = time_bound(watermark_ms)
        idx_keys = [decode_key(kb) for kb, _ in index.range_scan(None, end)]
        pkeys = [encode_key(k[1:]) for k in idx_keys]
        vals = [decode_value(v) for v in store.multi_get(pkeys)]
        for kb in pkeys:
            store.delete(kb)
        index.delete_range(None, end)
        return self._rows([k[1:] for k in idx_keys], vals)

    def _rows(self, keys: list[tuple], vals: list[tuple]):
        return keys, [v[0] for v in vals], to_arrays(vals, self.acc.types, offset=1)

    def _result(self, parts: list) -> pa.Table:
        keys = [k for ks, _, _ in parts for k in ks]
        if not keys:
            return self.schema.empty_table()
        ends = [e for _, es, _ in parts for e in es]
        accs = [pa.concat_arrays([arrs[i] for ks, _, arrs in parts if ks]) for i in range(len(self.acc.types))]
        cs = self.children[0].schema
        by_name = {self.spec.name: window_struct(pa.array([k[-1] for k in keys], pa.int64()), pa.array(ends, pa.int64()))}
        for i, name in enumerate(self.plain):
            by_name[name] = pa.array([k[i] for k in keys], cs.field(name).type)
        cols = [by_name[k] for k in self.key_columns] + self.acc.finalize(accs)
        return pa.Table.from_arrays(cols, schema=self.schema)


def build_session_window(compiler: Any, node: Any) -> PhysicalOp:
    validate.check_node(node, compiler.output_mode)   # for compiles that skip validate()
    from .aggregate import normalize_map_keys  # noqa: PLC0415 - cycle: increments.operators.aggregate -> increments.operators.session_window
    child = normalize_map_keys(compiler.build(node.child), [k for k in node.keys if isinstance(k, str)])
    mode = compiler.output_mode
    op = SessionWindowOp(child, node.keys, node.aggs, mode)
    if mode == "append" and not op.watermarked:
        raise AnalysisException(
            f"append output mode needs a watermark on the session window's column {op.spec.column!r}: add "
            f".with_watermark({op.spec.column!r}, \"<delay>\") before group_by (or use complete output mode)")
    compiler.next_operator_id(op)
    op.operator_name = "sessionWindowStateStoreSaveExec"
    op.evicts_by_watermark = mode in ("append", "update") and bool(compiler.watermark_delays)
    return op

"""Streaming aggregation: plain keys and tumbling/sliding event-time windows (SEMANTICS.md rule 5).

One batch (all vectorised in DuckDB/Arrow; Python touches each *group* once for the state store):
    1. window assignment: each row -> every window [start, start+size) with start <= t < end,
       starts aligned to the epoch (+ start offset) every `slide`; null event times are ignored
    2. partial aggregation per (window, keys) and state partition (md5 of the keys)
    3. late groups (append/update with a watermarked time key): window.end <= WL_b (or key <= WL_b
       for a watermarked plain timestamp key) are dropped and counted (groups, not rows)
    4. merge with the state (multi_get of the touched keys), put every touched group
    5. emit: update -> every touched group, then evict end <= W_b silently;
             append -> evict end <= W_b and emit exactly those (range scan + range delete);
             complete -> every group in state (never evicted)
State key: (window_end_us, window_start_us, *keys) | (time_key_us, *other keys) | (*keys), so
closed windows are a key range; value: the accumulators (count, sum, min, max, avg sum+count,
first, last). Recovery: the engine loads version N-1 and commits N, so a redo is exact.
Session windows are built by session_window.py; the accumulators are accumulators.py; a window over an
earlier aggregation's window column is rewritten first (plan/windows.py).
"""
from __future__ import annotations

import math
import threading
import weakref
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state.columnar import SMALL, encode_key_array, encode_keys
from state.columnar_values import decode_values, encode_value_array, encode_values

from ..errors import AnalysisException, ArithmeticOverflowError
from ..functions import AggExpr, SessionWindowSpec, WindowSpec
from ..plan import nodes as n, validate
from ..plan.windows import window_over_windows
from ..sql import quote_ident, run_sql
from ..types import state_type_name
from .accumulators import Accumulators
from .base import BatchContext, PhysicalOp
from .key_codec import as_type, decode_rows, time_bound, to_arrays, us_to_ts, window_struct
from .partitioning import partition_ids, partition_sql, split_by_partition
from .session_window import build_session_window
from .state_util import write_schema_once
from .stateless import SqlOp


def _may_overflow(col: Any) -> bool:
    """Whether a sum of some of `col`'s integers could leave BIGINT's range (max |value| * rows)."""
    if len(col) == 0 or col.null_count == len(col):
        return False
    mm = pc.min_max(col)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    return max(abs(lo), abs(hi)) * len(col) > 2 ** 63 - 1


class WindowAggregateOp(PhysicalOp):
    stateful = True

    def __init__(self, child: PhysicalOp, keys: tuple, aggs: tuple[AggExpr, ...], mode: str):
        where = "group_by(...).agg"
        cs = child.schema
        windows = [k for k in keys if isinstance(k, WindowSpec)]   # at most one: plan/validate.py
        self.window: WindowSpec | None = windows[0] if windows else None
        for k in keys:
            col = k.column if isinstance(k, WindowSpec) else k
            if col not in cs.names:
                raise AnalysisException(f"{where}: no column {col!r} (columns: {cs.names})")
        if self.window and not pa.types.is_timestamp(cs.field(self.window.column).type):
            raise AnalysisException(f"F.window({self.window.column!r}): the column must be a TIMESTAMP")
        self.keys, self.mode = keys, mode
        self.plain = [k for k in keys if isinstance(k, str)]
        wm = child.event_time_cols
        self.time_key: str | None = None   # watermarked plain timestamp key
        if self.window is None:
            self.time_key = next((k for k in self.plain if k in wm and pa.types.is_timestamp(cs.field(k).type)), None)
        self.watermarked = (self.window is not None and self.window.column in wm) or self.time_key is not None
        self.store_plain = [k for k in self.plain if k != self.time_key]
        self.acc = Accumulators(aggs, cs, where)
        fields = []
        for k in keys:
            if isinstance(k, WindowSpec):
                ts = pa.timestamp("us", tz="UTC")
                fields.append(pa.field(k.name, pa.struct([pa.field("start", ts), pa.field("end", ts)])))
            else:
                fields.append(cs.field(k))
        super().__init__([child], pa.schema(fields + self.acc.out_fields))
        # the window (or watermarked time key) keeps its watermark: a chained operator downstream
        # (F.window_time(window), a join on the window) is event-time based (Spark 3.5+)
        self.event_time_cols = {}
        if self.window is not None and self.window.column in wm:
            self.event_time_cols[self.window.name] = wm[self.window.column]
        elif self.time_key is not None:
            self.event_time_cols[self.time_key] = wm[self.time_key]
        self.key_columns = [k.name if isinstance(k, WindowSpec) else k for k in keys]
        #: partials computed ahead (prepare): id(table) -> (weak ref to the table, partitions, partials)
        self._prepared: dict[int, tuple[Any, int, pa.Table]] = {}
        self._prepared_lock = threading.Lock()

    # -- description -------------------------------------------------------------------------
    def _time_fields(self) -> list[tuple[str, str]]:
        if self.window:
            return [(f"{self.window.name}_end", "TIMESTAMPTZ"), (f"{self.window.name}_start", "TIMESTAMPTZ")]
        if self.time_key:
            return [(self.time_key, "TIMESTAMPTZ")]
        return []

    def key_fields(self) -> list[tuple[str, str]]:
        cs = self.children[0].schema
        return self._time_fields() + [(k, state_type_name(cs.field(k).type)) for k in self.store_plain]

    def state_functions(self) -> list[str]:
        return self.acc.functions()

    def state_schema(self) -> dict[str, Any]:
        w = self.window
        return {"key": self.key_fields(), "value": self.acc.value_fields(),
                "window": [w.size_ms, w.slide_ms, w.start_ms] if w else None}

    def describe(self) -> str:
        return f"StateStoreSave[{self.operator_name}, keys={self.key_columns}, mode={self.mode}]"

    def _columns_read(self, needed: set[str] | None) -> set[str]:
        """The input columns this aggregation reads (whatever its output needs)."""
        cols = {k.column if isinstance(k, WindowSpec) else k for k in self.keys}
        return cols | {a.column for a in self.acc.aggs if a.column is not None}

    # -- one batch ---------------------------------------------------------------------------
    def _time_cols(self) -> list[str]:
        return ["__we", "__ws"] if self.window else (["__tk"] if self.time_key else [])

    def _partials(self, table: pa.Table, nparts: int) -> pa.Table:
        """Window assignment + partial aggregation + partition, one DuckDB query over only the
        columns the keys and aggregates read. A tumbling window (slide == size) is one window per
        row, so it needs no fan-out; first/last need the input order (__rn), nothing else does."""
        fast = self._partials_arrow(table, nparts)
        if fast is not None:
            return fast
        used = [k for k in self.store_plain] + [a.column for a in self.acc.aggs if a.column is not None]
        if self.window:
            used.append(self.window.column)
        elif self.time_key:
            used.append(self.time_key)
        cols = ", ".join(quote_ident(c) for c in dict.fromkeys(used))
        if any(a.func in ("first", "last") for a in self.acc.aggs):
            table = table.append_column("__rn", pa.array(np.arange(table.num_rows, dtype=np.int64)))
            cols = (cols + ", " if cols else "") + "__rn"
        cols = cols or "1 AS __one"
        rel = f"(SELECT {cols} FROM __in)"
        if self.window:
            w = self.window
            size, slide, off = w.size_ms * 1000, w.slide_ms * 1000, w.start_ms * 1000
            nwin = math.ceil(size / slide)
            c = quote_ident(w.column)
            base = f"SELECT {cols}, epoch_us({c}) AS __t FROM __in WHERE {c} IS NOT NULL"
            last = f"(__t - (((__t - {off}) % {slide}) + {slide}) % {slide})"
            if nwin == 1 and size == slide:
                rel = f"(SELECT *, {last} AS __ws, {last} + {size} AS __we FROM ({base}) b)"
            else:
                rel = (f"(SELECT * FROM (SELECT b.*, {last} - r.k * {slide} AS __ws, {last} - r.k * {slide} + {size} AS __we "
                       f"FROM ({base}) b CROSS JOIN range(0, {nwin}) AS r(k)) WHERE __we > __t)")
        elif self.time_key:
            rel = f"(SELECT *, epoch_us({quote_ident(self.time_key)}) AS __tk FROM {rel})"
        groups = self._time_cols() + [quote_ident(k) for k in self.store_plain]
        gsql = ", ".join(groups)
        pcols = (["__ws"] if self.window else []) + [quote_ident(k) for k in self.store_plain]
        sel = (gsql + ", " if gsql else "") + self.acc.partial_sql()
        sql = (f"SELECT {sel}, {partition_sql(pcols, nparts)} AS __p FROM {rel} AS __r"
               + (f" GROUP BY {gsql}" if gsql else ""))
        out = run_sql(sql, {"__in": table})
        if not gsql and table.num_rows == 0:
            return out.slice(0, 0)
        return out

    _ARROW_AGG = {"count": "count", "sum": "sum", "min": "min", "max": "max", "avg": "sum"}

    def _partials_arrow(self, table: pa.Table, nparts: int) -> pa.Table | None:
        """The same partials as the DuckDB query, by Arrow's hash aggregation, for the common shape:
        a tumbling window (or none), count/sum/min/max/avg over numeric or timestamp columns, and
        plain keys Arrow can group. None when the shape is anything else (DuckDB decides)."""
        w = self.window
        if w is not None and w.size_ms != w.slide_ms:
            return None
        if not self.store_plain and w is None and self.time_key is None:
            return None   # a global aggregate: one group even over no rows (DuckDB's GROUP BY-less query)
        aggs: list[tuple[str, str]] = []
        for a in self.acc.aggs:
            if a.func not in self._ARROW_AGG:
                return None
            if a.column is not None:
                t = table.schema.field(a.column).type
                if not (pa.types.is_integer(t) or pa.types.is_floating(t)
                        or (a.func in ("min", "max") and pa.types.is_timestamp(t))):
                    return None
            if a.func == "sum" and pa.types.is_integer(t) and _may_overflow(table.column(a.column)):
                return None   # DuckDB's query sums exactly and fails on a BIGINT overflow; Arrow's wraps
            aggs.append((a.column, a.func))
        for k in self.store_plain:
            t = table.schema.field(k).type
            if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                    or pa.types.is_boolean(t) or pa.types.is_timestamp(t) or pa.types.is_date(t)):
                return None
        cols: dict[str, Any] = {}
        if w is not None or self.time_key is not None:
            tname = w.column if w is not None else self.time_key
            tcol = table.column(tname)
            if tcol.type.unit != "us":
                return None
            if w is not None and tcol.null_count:   # rows without an event time get no window
                table = table.filter(pc.is_valid(tcol))
                tcol = table.column(tname)
            us = as_type(tcol, pa.timestamp("us", tz=tcol.type.tz)).cast(pa.int64())
            if w is not None:
                size, off = w.size_ms * 1000, w.start_ms * 1000
                # floor division: t - ((t - off) mod size) == off + ((t - off) // size) * size, ~1/3 of np.mod's CPU
                ws = (us.to_numpy() - off) // size * size + off
                cols["__we"] = pa.array(ws + size)
                cols["__ws"] = pa.array(ws)
            else:
                cols["__tk"] = us
        for k in self.store_plain:
            cols[k] = table.column(k)
        names = list(cols)
        specs: list[tuple] = []
        for i, (c, func) in enumerate(aggs):
            if c is None:
                specs.append(([], "count_all"))
                continue
            src = f"__c{i}"
            col = table.column(c)
            if func == "avg":
                col = col.cast(pa.float64(), safe=False)   # as DuckDB (and Spark): a big BIGINT rounds
            cols[src] = col
            specs.append((src, self._ARROW_AGG[func], pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)
                          if func != "count" else pc.CountOptions(mode="only_valid")))
            if func == "avg":
                specs.append((src, "count", pc.CountOptions(mode="only_valid")))
        try:
            g = pa.table(cols).group_by(names, use_threads=False).aggregate(specs)
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
            return None
        out = {k: g.column(k) for k in names}
        # the aggregates, in spec order, follow the keys (pyarrow >= 13) or precede them (older)
        first = len(names) if g.column_names[:len(names)] == names else 0
        for i, (_, t, _, _) in enumerate(self.acc.accs):
            out[f"__a{i}"] = as_type(g.column(first + i), t)
        result = pa.table(out)
        pcols = (["__ws"] if w is not None else []) + list(self.store_plain)
        return result.append_column("__p", partition_ids(result, pcols, nparts))

    #: partials prepared ahead and not (yet) used are dropped beyond this many tables
    PREPARED_MAX = 8
    #: the empty output table (_result), made at its first use
    _empty: pa.Table | None = None
    #: batches whose partials were prepared ahead (a test or a profile checks the path ran)
    prepared_used = 0

    def prepare(self, table: pa.Table, nparts: int) -> None:
        """Compute the partials of `table` ahead of its batch, off the batch's thread (the local
        runner's read-ahead calls it for the rows of the next batches as they are decoded, when
        those rows reach this operator unchanged: scan -> with_watermark -> here). execute() uses
        them only for the very same table object and number of partitions, so a batch's output is
        what computing them in the batch gives; anything else is computed in the batch as usual."""
        partials = self._partials(table, nparts)
        with self._prepared_lock:
            for k in [k for k, v in self._prepared.items() if v[0]() is None]:
                del self._prepared[k]
            self._prepared[id(table)] = (weakref.ref(table), nparts, partials)
            while len(self._prepared) > self.PREPARED_MAX:
                del self._prepared[next(iter(self._prepared))]

    def _take_prepared(self, table: pa.Table, nparts: int) -> pa.Table | None:
        with self._prepared_lock:
            entry = self._prepared.pop(id(table), None)
        if entry is None or entry[0]() is not table or entry[1] != nparts:
            return None
        self.prepared_used += 1
        return entry[2]

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        stores = ctx.stores(self)
        if not self._schema_written:
            write_schema_once(self, ctx, self.key_fields(), self.acc.value_fields())
        if self.watermarked and self.mode != "complete":
            self._route_late(ctx, table)
        partials = self._take_prepared(table, len(stores))
        if partials is None:
            try:
                partials = self._partials(table, len(stores))
            except duckdb.Error as e:
                overflow = self.acc.overflow_error(e)
                if overflow is None:
                    raise
                raise self._overflow(ctx, overflow) from None
        tcol = self._time_cols()[0] if self._time_cols() else None
        if self.watermarked and self.mode != "complete" and partials.num_rows:
            wl_us = ctx.late_watermark(self) * 1000
            earliest = pc.min(partials.column(tcol)).as_py()      # nulls skipped (never late)
            if earliest is not None and earliest <= wl_us:         # else no group is late: nothing to filter
                late = pc.fill_null(pc.less_equal(partials.column(tcol), wl_us), False)
                n_late = pc.sum(late).as_py() or 0
                if n_late:
                    ctx.count_dropped(self, n_late)
                    partials = partials.filter(pc.invert(late))
        keycols = self._time_cols() + self.store_plain
        emitted: list[tuple[list[pa.Array], list[pa.Array]]] = []   # (key columns, acc columns) per part
        evict = self.watermarked and self.mode in ("append", "update")
        parts = split_by_partition(partials, len(stores))
        # (partition, its groups, their keys, the keys as an Arrow array when there are many)
        touched: list[tuple[int, pa.Table, list[bytes], pa.Array | None]] = []
        old: list[bytes | None] = []
        for p, part in enumerate(parts):
            if part.num_rows:
                karr = None
                if not keycols:
                    keys = [b""] * part.num_rows
                elif part.num_rows >= SMALL:
                    karr = encode_key_array([part.column(c) for c in keycols])
                    keys = None                                     # as a list only if needed (below)
                else:
                    keys = encode_keys([part.column(c) for c in keycols])
                old += stores[p].multi_get(keys) if karr is None else stores[p].multi_get_columns(karr)
                touched.append((p, part, keys, karr))
        if touched:  # one merge for every partition's groups (rows in partition order), no Python per group
            old_cols, existed = decode_values(old, self.acc.types)
            try:
                merged = self.acc.merge_columns(pa.concat_tables([t[1] for t in touched]), old_cols, existed)
            except ArithmeticOverflowError as e:
                raise self._overflow(ctx, e) from None
            # many groups and no eviction or full scan in the batch: keys and values as Arrow arrays,
            # inserted (every group new: a first batch) or put as such (the memory store keeps them so:
            # state.memory_runs); else one put_many of lists per store
            arrays = not evict and self.mode != "complete" and all(t[3] is not None for t in touched)
            fresh = arrays and not pc.any(existed).as_py()
            values = encode_value_array(merged.columns) if arrays else encode_values(merged.columns)
            at = 0
            for p, part, keys, karr in touched:
                n = part.num_rows
                if fresh:
                    stores[p].insert_columns(karr, values.slice(at, n))
                elif arrays:
                    stores[p].put_columns(karr, values.slice(at, n))
                else:
                    stores[p].put_many(karr.to_pylist() if keys is None else keys, values[at:at + n])
                if self.mode == "update":
                    emitted.append(([part.column(c) for c in keycols],
                                    [merged.column(i).slice(at, n) for i in range(merged.num_columns)]))
                at += n
        for store in stores:
            if evict:
                end = time_bound(ctx.eviction_watermark(self))
                if self.mode == "append":
                    rows = list(store.range_scan(None, end))
                    if rows:                  # (no rows: no output part; _result drops empty parts anyway)
                        emitted.append(self._from_state(rows))
                store.delete_range(None, end)
            if self.mode == "complete":
                emitted.append(self._from_state(list(store.iter_all())))
        return self._result(emitted)

    def _overflow(self, ctx: BatchContext, e: ArithmeticOverflowError) -> ArithmeticOverflowError:
        return ArithmeticOverflowError(ctx.where(f"operator {self.operator_id}:{self.operator_name} "
                                                 f"(group_by({', '.join(self.key_columns)}).agg): {e}"))

    def _route_late(self, ctx: BatchContext, table: pa.Table) -> None:
        """The input rows this batch drops as late, to the late_rows table. Lateness is per (row,
        window), window.end <= WL (SEMANTICS.md rule 5): an input row goes there once when any of
        its windows drops it (a sliding-window row may still count in a later window). A plain
        watermarked time key: key <= WL. Null event times are never late."""
        if not self.late_targets:
            return
        wl_us = ctx.late_watermark(self) * 1000
        col = self.window.column if self.window else self.time_key
        t = table.column(col).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        valid = pc.is_valid(t).to_numpy(zero_copy_only=False)
        tv = pc.fill_null(t, 0).to_numpy()
        if self.window:
            w = self.window
            size, slide, off = w.size_ms * 1000, w.slide_ms * 1000, w.start_ms * 1000
            last = tv - np.mod(tv - off, slide)             # start of the latest window holding t
            first_end = last + size - (math.ceil(size / slide) - 1) * slide
            while True:                                     # the earliest window still holding t
                behind = first_end <= tv
                if not behind.any():
                    break
                first_end = np.where(behind, first_end + slide, first_end)
            late = valid & (first_end <= wl_us)
        else:
            late = valid & (tv <= wl_us)
        ctx.route_late(self, [(None, table.filter(pa.array(late)))] if late.any() else [], ctx.late_watermark(self))

    def columns_read(self, needed: set[str] | None) -> set[str] | None:
        """Every input column when late rows go to a table (they keep the whole row)."""
        if self.late_targets:
            return None
        return self._columns_read(needed)

    def _key_types(self) -> list[pa.DataType]:
        cs = self.children[0].schema
        return [pa.int64()] * len(self._time_cols()) + [cs.field(k).type for k in self.store_plain]

    def _from_state(self, rows: list[tuple[bytes, bytes]]) -> tuple[list[pa.Array], list[pa.Array]]:
        keys, values = decode_rows(rows)
        return to_arrays(keys, self._key_types()), to_arrays(values, self.acc.types)

    def _result(self, parts: list[tuple[list[pa.Array], list[pa.Array]]]) -> pa.Table:
        """The output rows of the parts: (key columns in state-key order: time columns as int us,
        then the plain keys; accumulator columns)."""
        parts = [(ks, arrs) for ks, arrs in parts if arrs and len(arrs[0])]
        if not parts:
            if self._empty is None:
                self._empty = self.schema.empty_table()     # immutable: one per operator
            return self._empty

        def concat(cols: list) -> pa.Array:
            cols = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols]
            return cols[0] if len(cols) == 1 else pa.concat_arrays(cols)

        types = self._key_types()
        keys = [concat([as_type(ks[i], t) for ks, _ in parts]) for i, t in enumerate(types)]
        accs = [concat([arrs[i] for _, arrs in parts]) for i in range(len(self.acc.types))]
        cs = self.children[0].schema
        ntime = len(self._time_cols())
        by_name: dict[str, pa.Array] = {}
        if self.window:
            by_name[self.window.name] = window_struct(keys[1], keys[0])
        elif self.time_key:
            by_name[self.time_key] = us_to_ts(keys[0], cs.field(self.time_key).type)
        for i, name in enumerate(self.store_plain):
            by_name[name] = keys[ntime + i]
        cols = [by_name[k] for k in self.key_columns] + self.acc.finalize(accs)
        return pa.Table.from_arrays(cols, schema=self.schema)


def normalize_map_keys(child: PhysicalOp, keys: list[str]) -> PhysicalOp:
    """A MAP grouping key is a group per distinct map whatever its entries' order (Spark 4 sorts
    the entries to group by a map): its entries sorted by key first, as one more SQL stage."""
    maps = [k for k in keys if k in child.schema.names and pa.types.is_map(child.schema.field(k).type)]
    if not maps:
        return child
    repl = ", ".join(f"map_from_entries(list_sort(map_entries({quote_ident(k)}))) AS {quote_ident(k)}" for k in maps)
    op = SqlOp(child, [lambda rel: f"SELECT * REPLACE ({repl}) FROM {rel} AS __in"], child.schema,
               [f"SortMapKeys[{', '.join(maps)}]"])
    op.event_time_cols = dict(child.event_time_cols)
    op.qualifiers, op.alias = child.qualifiers, child.alias
    return op


def build_aggregate(compiler: Any, node: n.Aggregate) -> PhysicalOp:
    validate.check_node(node, compiler.output_mode)
    if any(isinstance(k, SessionWindowSpec) for k in node.keys):
        return build_session_window(compiler, node)
    node = window_over_windows(compiler, node)
    child = normalize_map_keys(compiler.build(node.child), [k for k in node.keys if isinstance(k, str)])
    mode = compiler.output_mode
    op = WindowAggregateOp(child, node.keys, node.aggs, mode)
    if mode == "append" and not op.watermarked:
        raise AnalysisException(
            "append output mode is not supported for a streaming aggregation without a watermark on its "
            "event-time grouping: add .with_watermark(\"<event time column>\", \"<delay>\") before group_by and "
            "group by F.window(\"<event time column>\", ...) (or use update or complete output mode)")
    compiler.next_operator_id(op)
    op.operator_name = "stateStoreSave"
    # Spark runs a trailing no-data batch for append/update aggregations whenever the query has a
    # watermark and it advanced (StateStoreSaveExec.shouldRunAnotherBatch)
    op.evicts_by_watermark = mode in ("append", "update") and bool(compiler.watermark_delays)
    return op

"""transform_with_state: arbitrary stateful processing (Spark 4's TransformWithStateExec).

Per batch N, for each state partition p (stores loaded at N-1, committed as N by the engine):

    rows  = child rows; in event_time mode, if the input has a watermarked event-time column, drop
            rows with event_time <= W_{N-1} (late) and count them (other modes keep late rows)
    part  = rows of p (md5 of the key columns, as every stateful operator: partitioning.partition_sql)
    proc  = shallow copy of the user's processor; proc.init(handle(store p, now, W_N))
    batch 0 with initial_state (Spark 4): for each initial-state row of p, in table order,
            proc.handle_initial_state(key, row, tv) (no output; state and timers of that key)
    for each grouping key of part (first-appearance order): proc.handle_input_rows(key, rows, tv)
    fire timers of p with expiry <= now (processing_time) or <= W_N (event_time), in (expiry, key)
            order, each deleted then handed to proc.handle_expired_timer(key, tv, info)
    TTL cleanup: state whose expiry <= now is removed (reads already treat it as absent)
    proc.close()

"now" is ctx.timestamp_ms, the batch's processing time recorded in offsets[N], so a redo after a
crash sees the same clock, fires the same timers and expires the same state: the output and the
state of batch N are identical on replay (exactly-once with an idempotent sink).

Time-based batches: when the query has a watermark, a trailing no-data batch runs when the watermark
advanced (SEMANTICS.md rule 2), in every time mode, as Spark 4.3 does (observed: time_mode None runs
it too, with no output). In processing_time mode Spark 4.3 asks for another batch unconditionally
(under available_now it never terminates); increments does not. In processing_time mode, after each batch the earliest
registered timer is reported by `next_timer_ms(N)`; the engine records it in the process step's info
and in commits[N].extra["next_timers"] (no file in the checkpoint is overwritten), and the plan of
the next batch asks for a no-data batch when that timer is due (the redo path never reads it).

State layout (one keyspace per partition; state/encoding order-preserving keys), every key is
(kind, name, *grouping key, sub: bytes), see increments/stateful_processor.py:
  value/<name>, list/<name>, map/<name> (sub = encoded map key), timer/"" (sub = encoded expiry),
  ~timer/<padded expiry> and ~ttl/<padded expiry> (time-ordered indexes for range scans).
"""
from __future__ import annotations

import copy
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from state.encoding import decode_key, decode_value, encode_key, encode_value

from ..errors import AnalysisException
from .key_codec import refuse_map_keys
from ..plan import nodes as n
from ..plan.validate import check_node
from ..sql import quote_ident, run_sql
from ..stateful_codec import LIST, MAP, TIMER_INDEX, TTL_INDEX, VALUE, pad_ms, state_key, timer_key, unpad_ms
from ..stateful_processor import ExpiredTimerInfo, QueryInfo, StatefulProcessorHandle, TimerValues
from ..types import state_type_name
from .base import BatchContext, PhysicalOp
from .partitioning import partition_sql, split_by_partition
from .state_util import write_schema_once

_VALUE_FIELDS = [("value", "STRUCT"), ("expires_at_ms", "BIGINT"), ("map_key", "STRUCT"),
                 ("list_values", "LIST"), ("list_expires_at_ms", "LIST")]


class TransformWithStateOp(PhysicalOp):
    stateful = True

    def __init__(self, child: PhysicalOp, keys: tuple[str, ...], processor: Any, schema: pa.Schema,
                 time_mode: str | None, output_mode: str):
        super().__init__([child], schema)
        self.keys, self.processor, self.time_mode, self.tws_output_mode = list(keys), processor, time_mode, output_mode
        self.operator_name = "transformWithStateInPySparkExec"   # what PySpark 4.3 reports
        self.evicts_by_watermark = True            # with a watermark: trailing batch in every time mode
        self.input_event_time = next(iter(child.event_time_cols), None)
        self._next_timer: tuple[int, int | None] = (-1, None)   # (batch id, earliest processing-time timer)
        self.event_time_cols = {}                  # output rows carry no watermark (Spark resets it)
        self.initial_state: PhysicalOp | None = None   # static op of initial-state rows (batch 0 only)
        self.initial_keys: list[str] = []

    def describe(self) -> str:
        return (f"TransformWithState({type(self.processor).__name__}, keys={self.keys}, time_mode={self.time_mode}, "
                f"output_mode={self.tws_output_mode})")

    def state_schema(self) -> dict[str, Any]:
        child = self.children[0].schema
        key = [("kind", "VARCHAR"), ("name", "VARCHAR")] + [(k, state_type_name(child.field(k).type)) for k in self.keys]
        return {"key": [list(f) for f in key + [("sub", "BLOB")]], "value": [list(f) for f in _VALUE_FIELDS],
                "time_mode": self.time_mode}

    # -- time-based work ------------------------------------------------------------------
    def next_timer_ms(self, batch_id: int) -> int | None:
        """The earliest processing-time timer left after batch `batch_id` ran in this process
        (None: none, or not in processing_time mode). The engine stores it in commits[N]."""
        b, t = self._next_timer
        return t if b == batch_id and self.time_mode == "processing_time" else None

    # -- the batch ------------------------------------------------------------------------
    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self._drop_late(ctx, self.children[0].execute(ctx))
        stores = ctx.stores(self)
        write_schema_once(self, ctx, self.state_schema()["key"], self.state_schema()["value"])
        part_col = run_sql(f"SELECT {partition_sql([quote_ident(k) for k in self.keys], len(stores))} AS __p FROM __in",
                           {"__in": table}).column("__p") if table.num_rows else pa.array([], pa.int32())
        parts = split_by_partition(table.append_column("__p", part_col), len(stores))
        init_parts = self._initial_parts(ctx, len(stores))
        now = ctx.timestamp_ms
        wm = ctx.eviction_watermark(self) if self.time_mode is not None else -1   # Spark 4.3: W_N (0 without one)
        out = _Output(self.schema, ctx)
        metrics: dict[str, int] = {}
        rows = {"num_rows_total": 0, "num_rows_updated": 0, "num_rows_removed": 0}
        next_timer: int | None = None
        for p, store in enumerate(stores):
            handle = StatefulProcessorHandle(store, self.time_mode, now, wm, _query_info(ctx))
            proc = copy.copy(self.processor)
            proc.init(handle)
            tv = TimerValues(now if self.time_mode is not None else -1, wm)
            if init_parts is not None:
                self._initial_rows(proc, handle, init_parts[p], tv, ctx)
            self._input_rows(proc, handle, parts[p].drop_columns(["__p"]), tv, out, ctx)
            if self.time_mode is not None:
                self._fire_timers(proc, handle, now if self.time_mode == "processing_time" else wm, tv, out, ctx)
            handle.metrics["num_values_removed_due_to_ttl_expiry"] += _ttl_cleanup(store, now)
            handle._key = None
            proc.close()
            for k, v in handle.metrics.items():
                metrics[k] = metrics.get(k, 0) + int(v)
            rows["num_rows_updated"] += handle._rows["updated"]
            rows["num_rows_removed"] += handle._rows["removed"]
            rows["num_rows_total"] += _count_user_rows(store)
            if self.time_mode == "processing_time":
                first = next(iter(store.range_scan(encode_key((TIMER_INDEX,)), encode_key((TIMER_INDEX + "\x00",)))), None)
                if first is not None:
                    t = unpad_ms(decode_key(first[0])[1])
                    next_timer = t if next_timer is None else min(next_timer, t)
        self._next_timer = (ctx.batch_id, next_timer)
        ctx.custom_metrics.setdefault(self.operator_id, {}).update({**rows, "custom_metrics": metrics})
        return out.table()

    def _drop_late(self, ctx: BatchContext, table: pa.Table) -> pa.Table:
        """In event_time mode, rows with event_time <= W_{N-1} are late (as Spark's late-event
        filter); nulls are kept. Spark 4.3 drops nothing in the other time modes."""
        col = self.input_event_time
        if col is None or table.num_rows == 0 or self.time_mode != "event_time":
            return table
        ms = pc.divide(table.column(col).cast(pa.int64()), 1000)
        late = pc.fill_null(pc.less_equal(ms, ctx.late_watermark(self)), False)
        dropped = pc.sum(late.cast(pa.int64())).as_py() or 0
        ctx.route_late(self, [(None, table.filter(late))] if dropped else [], ctx.late_watermark(self))
        if dropped:
            ctx.count_dropped(self, dropped)
            table = table.filter(pc.invert(late))
        return table

    def _initial_parts(self, ctx: BatchContext, nparts: int) -> list[pa.Table] | None:
        """Batch 0 only: the initial state's rows (key columns renamed and cast to the stream's),
        split by state partition like the input rows."""
        if self.initial_state is None or ctx.batch_id != 0:
            return None
        table = self.initial_state.execute(ctx)
        child = self.children[0].schema
        cols = {k: table.column(ik).cast(child.field(k).type) for k, ik in zip(self.keys, self.initial_keys)}
        rest = [c for c in table.column_names if c not in self.initial_keys and c not in cols]
        table = pa.table({**cols, **{c: table.column(c) for c in rest}})
        part_col = run_sql(f"SELECT {partition_sql([quote_ident(k) for k in self.keys], nparts)} AS __p FROM __in",
                           {"__in": table}).column("__p") if table.num_rows else pa.array([], pa.int32())
        return [t.drop_columns(["__p"]) for t in split_by_partition(table.append_column("__p", part_col), nparts)]

    def _initial_rows(self, proc: Any, handle: StatefulProcessorHandle, part: pa.Table, tv: TimerValues,
                      ctx: BatchContext) -> None:
        fn = proc.handle_initial_state
        for row in part.to_pylist():
            key = tuple(row[k] for k in self.keys)
            handle._key = key
            try:
                fn(key, row, tv)
            except Exception as e:
                raise _wrap(e, ctx.where(f"{type(proc).__name__}.handle_initial_state(key={key!r}) failed: {e}")) from e

    def _input_rows(self, proc: Any, handle: StatefulProcessorHandle, part: pa.Table, tv: TimerValues,
                    out: "_Output", ctx: BatchContext) -> None:
        if part.num_rows == 0:
            return
        rows = part.to_pylist()
        if any(pa.types.is_nested(part.schema.field(k).type) for k in self.keys):
            # a STRUCT / list key (Arrow's group_by takes none): grouped by its state key encoding,
            # in first-seen order; the key's values are passed as they are (a struct as a dict)
            by_key: dict[bytes, tuple[tuple, list[int]]] = {}
            for i, r in enumerate(rows):
                key = tuple(r[k] for k in self.keys)
                by_key.setdefault(encode_key(key), (key, []))[1].append(i)
            grouped = list(by_key.values())
        else:
            idx = part.append_column("__row", pa.array(range(part.num_rows), pa.int64()))
            groups = idx.group_by(self.keys, use_threads=False).aggregate([("__row", "list")])
            keys = groups.select(self.keys).to_pylist()
            grouped = [(tuple(key_d[k] for k in self.keys), members)
                       for key_d, members in zip(keys, groups.column("__row_list").to_pylist())]
        for key, members in grouped:
            handle._key = key
            try:
                out.add(proc.handle_input_rows(key, iter([rows[i] for i in members]), tv))
            except Exception as e:
                raise _wrap(e, ctx.where(f"{type(proc).__name__}.handle_input_rows(key={key!r}) failed: {e}")) from e

    def _fire_timers(self, proc: Any, handle: StatefulProcessorHandle, limit: int, tv: TimerValues,
                     out: "_Output", ctx: BatchContext) -> None:
        store = handle._store
        due = [decode_key(k) for k, _ in store.range_scan(encode_key((TIMER_INDEX,)),
                                                          encode_key((TIMER_INDEX, pad_ms(limit + 1))))]
        for k in due:
            expiry, key = unpad_ms(k[1]), tuple(k[2:-1])
            handle._key = key
            if store.get(timer_key(key, expiry)) is None:
                continue                        # deleted by an earlier handler of this batch
            handle.delete_timer(expiry)                 # Spark counts it in num_deleted_timers too
            handle.metrics["num_expired_timers"] += 1
            try:
                out.add(proc.handle_expired_timer(key, tv, ExpiredTimerInfo(expiry)))
            except Exception as e:
                raise _wrap(e, ctx.where(f"{type(proc).__name__}.handle_expired_timer(key={key!r}, expiry={expiry}) "
                                         f"failed: {e}")) from e


def _count_user_rows(store: Any) -> int:
    """Spark's numRowsTotal: value rows, list rows (one per key) and map entries; timers and the
    internal indexes are not counted. Scans the partition's state (O(state) per batch)."""
    return sum(1 for kind in (VALUE, LIST, MAP) for _ in store.prefix_scan(encode_key((kind,))))


def _ttl_cleanup(store: Any, now: int) -> int:
    """Remove state whose expiry <= now, found through the ~ttl index; returns values removed."""
    removed = 0
    for k, _ in list(store.range_scan(encode_key((TTL_INDEX,)), encode_key((TTL_INDEX, pad_ms(now + 1))))):
        store.delete(k)
        parts = decode_key(k)
        kind, name, sub = decode_key(parts[-1])
        target = state_key(kind, name, tuple(parts[2:-1]), sub)
        b = store.get(target)
        if b is None:
            continue
        p = decode_value(b)
        if kind == LIST:
            keep = [i for i, e in enumerate(p[4]) if e is None or e > now]
            removed += len(p[4]) - len(keep)
            if not keep:
                store.delete(target)
            elif len(keep) < len(p[4]):
                store.put(target, encode_value((None, None, None, [p[3][i] for i in keep], [p[4][i] for i in keep])))
        elif p[1] is not None and p[1] <= now:
            store.delete(target)
            removed += 1
    return removed


class _Output:
    """Collects what the handlers return (dicts, tuples, Arrow tables/batches, pandas frames)."""

    def __init__(self, schema: pa.Schema, ctx: BatchContext):
        self.schema, self.ctx = schema, ctx
        self.rows: list[dict] = []
        self.tables: list[pa.Table] = []

    def add(self, result: Any) -> None:
        if result is None:
            return
        if isinstance(result, (pa.Table, pa.RecordBatch, dict)) or _is_pandas(result):
            result = [result]
        for item in result:
            if isinstance(item, dict):
                self.rows.append(item)
            elif isinstance(item, (tuple, list)):
                self.rows.append(dict(zip(self.schema.names, item)))
            elif isinstance(item, (pa.Table, pa.RecordBatch)) or _is_pandas(item):
                self._flush()
                t = pa.Table.from_pandas(item, preserve_index=False) if _is_pandas(item) else pa.table(item)
                self.tables.append(self._conform(t))
            elif item is not None:
                raise TypeError(self.ctx.where(f"transform_with_state: a handler produced {type(item).__name__}; "
                                               "yield dicts, tuples, Arrow tables/record batches or pandas DataFrames"))

    def _conform(self, t: pa.Table) -> pa.Table:
        missing = [c for c in self.schema.names if c not in t.column_names]
        if missing:
            raise ValueError(self.ctx.where(f"transform_with_state: output lacks columns {missing} of the declared "
                                            f"output schema {self.schema}"))
        return t.select(self.schema.names).cast(self.schema)

    def _flush(self) -> None:
        if self.rows:
            try:
                self.tables.append(pa.Table.from_pylist(self.rows, schema=self.schema))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
                raise ValueError(self.ctx.where(f"transform_with_state: output rows do not match the declared output "
                                                f"schema {self.schema}: {e}")) from e
            self.rows = []

    def table(self) -> pa.Table:
        self._flush()
        return pa.concat_tables(self.tables) if self.tables else self.schema.empty_table()


def _wrap(e: Exception, msg: str) -> Exception:
    """The same exception type with the query/batch/key named (RuntimeError if it can't be rebuilt)."""
    try:
        return type(e)(msg)
    except Exception:  # noqa: BLE001 - exception types with other constructors
        return RuntimeError(msg)


def _is_pandas(x: Any) -> bool:
    return type(x).__name__ == "DataFrame" and type(x).__module__.startswith("pandas")


def _query_info(ctx: BatchContext) -> QueryInfo:
    return QueryInfo(ctx.query_name, "", ctx.batch_id)


def build(compiler: Any, node: n.TransformWithState) -> PhysicalOp:
    child = compiler.build(node.child)
    missing = [k for k in node.keys if k not in child.schema.names]
    if missing:
        raise AnalysisException(f"transform_with_state: grouping columns {missing} not found (columns: {child.schema.names})")
    check_node(node)   # the plan-only refusals (plan/validate.py): for compiles that skip validate()
    refuse_map_keys("transform_with_state", child.schema, node.keys)
    op = TransformWithStateOp(child, node.keys, node.processor, node.output_schema.to_arrow(), node.time_mode,
                              node.output_mode)
    if node.initial_state is not None:
        init = compiler.build(node.initial_state)   # static: not a child (no source, no pruning)
        missing = [k for k in node.initial_state_keys if k not in init.schema.names]
        if missing:
            raise AnalysisException(f"transform_with_state: initial_state has no key columns {missing} (columns: "
                                    f"{init.schema.names}); name them like the grouping keys {list(node.keys)} or "
                                    "pass initial_state=frame.group_by(<its key columns>)")
        op.initial_state, op.initial_keys = init, list(node.initial_state_keys)
    compiler.next_operator_id(op)
    return op

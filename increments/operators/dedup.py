"""drop_duplicates(subset) and drop_duplicates_within_watermark(subset) (SEMANTICS.md rule 5).

drop_duplicates, one batch:
    1. when the input carries a watermarked event-time column: rows with event_time <= WL_b are
       dropped and counted (input rows), whether or not the column is in the subset (as Spark)
    2. the first row of each subset key within the batch is the candidate (row order)
    3. it is emitted iff its key is not in state; the key is then stored
    4. if the event-time column is in the subset, keys with event_time <= W_b are evicted (range
       delete: key = (event_time_us, *other subset values)); otherwise state grows without bound
       (a warning is recorded at planning time)
drop_duplicates_within_watermark, one batch (needs a watermark):
    1. rows with event_time <= WL_b are dropped and counted
    2. first row per key in the batch; emitted iff the key is not in state; stored with
       expiry = event_time + delay (a dropped duplicate does not refresh it)
    3. keys with expiry <= W_b are evicted, found by a range scan of the side index store
       state/<id>-byexpiry/ keyed (expiry_us, *subset) (committed/aborted with the primary stores)
Partitions: md5 of the subset values (without the event time for the within-watermark variant).
Recovery: state version N-1 is loaded and N committed by the engine, so a redo is exact.
"""
from __future__ import annotations

from itertools import repeat
from operator import is_
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state.columnar import encode_key_array
from state.columnar_values import encode_value_array
from state.encoding import encode_value
from state.memory_runs import empty_values

from ..errors import AnalysisException
from ..plan import nodes as n
from ..redaction import logger as redacting_logger
from ..sql import quote_ident, run_sql
from ..types import state_type_name
from .base import BatchContext, PhysicalOp
from .key_codec import time_bound, refuse_map_keys
from .partitioning import partition_ids, partition_sql
from .state_util import side_stores, write_schema_once

_EMPTY = encode_value(())


class DeduplicateOp(PhysicalOp):
    stateful = True

    def __init__(self, child: PhysicalOp, subset: tuple[str, ...] | None, within_watermark: bool):
        super().__init__([child], child.schema)
        cs = child.schema
        self.subset = list(subset) if subset else list(cs.names)
        for c in self.subset:
            if c not in cs.names:
                raise AnalysisException(f"drop_duplicates: no column {c!r} (columns: {cs.names})")
        refuse_map_keys("drop_duplicates", cs, self.subset)
        self.within = within_watermark
        wm = child.event_time_cols
        self.event_col = next(iter(wm), None)          # the watermarked column of the input
        self.delay_us = wm[self.event_col][1] * 1000 if self.event_col else 0
        if within_watermark:
            if self.event_col is None:
                raise AnalysisException("drop_duplicates_within_watermark needs a watermark: add "
                                        ".with_watermark(\"<event time column>\", \"<delay>\") before it")
            self.key_cols = [c for c in self.subset if c != self.event_col]
            if not self.key_cols:
                raise AnalysisException("drop_duplicates_within_watermark: the subset needs a column other than "
                                        f"the event-time column {self.event_col!r}")
            self.time_in_key = False
        else:
            self.time_in_key = self.event_col in self.subset
            self.key_cols = [c for c in self.subset if c != self.event_col] if self.time_in_key else self.subset
        self.key_columns = list(self.subset)

    def key_fields(self) -> list[tuple[str, str]]:
        cs = self.children[0].schema
        time = [(self.event_col, "TIMESTAMPTZ")] if self.time_in_key else []
        return time + [(c, state_type_name(cs.field(c).type)) for c in self.key_cols]

    def value_fields(self) -> list[tuple[str, str]]:
        return [("expires_at", "TIMESTAMPTZ")] if self.within else []

    def state_schema(self) -> dict[str, Any]:
        return {"key": self.key_fields(), "value": self.value_fields(), "within_watermark": self.within}

    def describe(self) -> str:
        return f"{'DedupWithinWatermark' if self.within else 'Deduplicate'}[{', '.join(self.subset)}]"

    def _candidates(self, ctx: BatchContext, table: pa.Table, nparts: int) -> pa.Table:
        table = table.append_column("__rn", pa.array(np.arange(table.num_rows, dtype=np.int64)))
        if self.event_col:
            wl = ctx.late_watermark(self)
            late = pc.fill_null(pc.less_equal(pc.cast(table.column(self.event_col), pa.int64()), wl * 1000), False)
            n_late = pc.sum(late).as_py() or 0
            ctx.route_late(self, [(None, table.filter(late))] if n_late else [], wl)
            if n_late:
                ctx.count_dropped(self, n_late)
                table = table.filter(pc.invert(late))
        names = ([self.event_col] if self.time_in_key else []) + list(self.key_cols)
        fast = self._candidates_arrow(table, names, nparts)
        return fast if fast is not None else self._candidates_sql(table, names, nparts)

    def _candidates_sql(self, table: pa.Table, names: list[str], nparts: int) -> pa.Table:
        keys = [quote_ident(c) for c in names]
        extra = f", epoch_us({quote_ident(self.event_col)}) AS __t" if self.event_col else ""
        return run_sql(f"SELECT *{extra}, {partition_sql(keys, nparts)} AS __p FROM __in "
                       f"QUALIFY row_number() OVER (PARTITION BY {', '.join(keys)} ORDER BY __rn) = 1 ORDER BY __rn",
                       {"__in": table})

    def _candidates_arrow(self, table: pa.Table, names: list[str], nparts: int) -> pa.Table | None:
        """The first row of each key in input order (the QUALIFY query's rows, same order, same
        partitions) by Arrow's hash aggregation, for keys Arrow groups as DuckDB does (integers,
        strings, booleans, dates, timestamps: no floats, whose NaN and -0.0 DuckDB groups its own way)."""
        for c in names:
            t = table.schema.field(c).type
            if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                    or pa.types.is_boolean(t) or pa.types.is_date(t) or pa.types.is_timestamp(t)):
                return None
        ev = self.event_col
        if ev is not None and table.schema.field(ev).type.unit != "us":
            return None
        try:
            first = (table.select(names).append_column("__i", pa.array(np.arange(table.num_rows, dtype=np.int64)))
                     .group_by(names, use_threads=False).aggregate([("__i", "min")]))
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
            return None
        keep = np.zeros(table.num_rows, np.bool_)                # the first rows, in input (__rn) order
        keep[first.column("__i_min").to_numpy()] = True
        out = table.filter(pa.array(keep))
        if ev is not None:                                       # epoch_us(event time)
            out = out.append_column("__t", out.column(ev).cast(pa.int64()))
        return out.append_column("__p", partition_ids(out, names, nparts))

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        stores = ctx.stores(self)
        index = side_stores(ctx, self, "byexpiry") if self.within else None
        write_schema_once(self, ctx, self.key_fields(), self.value_fields())
        cand = self._candidates(ctx, table, len(stores))          # first row per key, in input order
        emit = np.zeros(cand.num_rows, np.bool_)
        if cand.num_rows:
            kcols = [cand.column(c) for c in self.key_cols]
            kcols = ([cand.column("__t")] if self.time_in_key else []) + kcols
            expiry = pc.add(cand.column("__t"), self.delay_us) if self.within else None
            pids = cand.column("__p").to_numpy()
        for p, store in enumerate(stores):
            idx = index[p] if index else None
            rows = (np.flatnonzero(pids == p) if len(stores) > 1 else np.arange(len(pids))) if cand.num_rows else ()
            if len(rows):   # keys and values of whole columns (state.columnar), one bulk write per store
                karr = encode_key_array([c.take(rows) for c in kcols])
                fresh = np.fromiter(map(is_, store.multi_get_columns(karr), repeat(None)), np.bool_, len(karr))
                new_rows = rows[fresh]
                emit[new_rows] = True
                # the keys just read as absent, as Arrow columns: insert_columns (no second lookup; the
                # memory store keeps them as arrays: state.memory_runs); the index's keys are new too (an
                # (expiry, key) pair of a key absent from the store is absent from the index)
                if len(new_rows):
                    new_keys = karr if len(new_rows) == len(rows) else karr.filter(pa.array(fresh))
                    if self.within:
                        exp = expiry.take(new_rows)
                        store.insert_columns(new_keys, encode_value_array([exp]))
                        ik = encode_key_array([exp] + [cand.column(c).take(new_rows) for c in self.key_cols])
                        idx.insert_columns(ik, empty_values(len(ik)))
                    else:
                        store.insert_columns(new_keys, pa.array([_EMPTY] * len(new_rows), pa.binary()))
            self._evict(ctx, store, idx)
        if not emit.any():
            return self.schema.empty_table()
        return cand.filter(pa.array(emit)).select(self.schema.names)      # input order, as the candidates

    def _evict(self, ctx: BatchContext, store, index) -> None:
        end = time_bound(ctx.eviction_watermark(self))
        if self.within:
            ikeys = index.pop_range_columns(None, end)
            if len(ikeys):   # an index key is (expiry, *key): the key's bytes follow the expiry's (an int, or null)
                store.remove_columns(_after_expiry(ikeys))     # each one stored
        elif self.time_in_key:
            store.delete_range(None, end)


def _after_expiry(ikeys: pa.Array) -> pa.Array:
    """The store keys of expiry-index keys: what follows the expiry's encoding (9 bytes for an int, 1
    for a null), sliced in Arrow when every expiry is an int."""
    if len(ikeys) and not ikeys.null_count and pc.all(
            pc.equal(pc.binary_slice(ikeys, 0, 1), pa.scalar(b"\x10", ikeys.type))).as_py():
        # an explicit stop: pyarrow 26's binary_slice without one fails ("Negative buffer resize")
        return pc.binary_slice(ikeys, 9, pc.max(pc.binary_length(ikeys)).as_py())
    return pa.array([k[9:] if k[0] == 0x10 else k[1:] for k in ikeys.to_pylist()], pa.binary())


def build_dedup(compiler: Any, node: n.Deduplicate) -> PhysicalOp:
    child = compiler.build(node.child)
    op = DeduplicateOp(child, node.subset, node.within_watermark)
    compiler.next_operator_id(op)
    op.operator_name = "dedupeWithinWatermark" if op.within else "dedupe"
    # Spark runs the trailing no-data batch for any dedup in a query with a watermark
    op.evicts_by_watermark = bool(compiler.watermark_delays)
    if not op.within and not op.time_in_key:
        compiler.warnings.append(
            f"drop_duplicates({op.subset}) keeps every key forever (unbounded state): include the watermarked "
            "event-time column in the subset, or use drop_duplicates_within_watermark")
        redacting_logger("increments.dedup").warning("%s", compiler.warnings[-1])
    return op

"""AUTO CDC: `write_stream.apply_changes(keys, sequence_by, apply_as_deletes, except_columns,
stored_as_scd_type)` as a stateful operator at the root of the plan, with Databricks' AUTO CDC /
APPLY CHANGES semantics (Spark 4.3's declarative pipelines implement the same). The operator is the
sequencing brain; the sink only applies what it emits (sinks/auto_cdc.py, sinks/auto_cdc_postgres.py).

Input: change events (the rows the query's frame emits). Per event: its key (`keys`, NULL-safe:
a NULL key is a key of its own), its sequence (`sequence_by`: one column or a list of columns
compared in order; a NULL sequence fails the batch naming the row), and whether it is a delete
(`apply_as_deletes`, SQL; NULL counts as false). The target's columns: `columns` (default all)
minus `except_columns`; keys must stay.

Order of events: by sequence; at an equal sequence a delete wins over an upsert, then the event with
the greater content hash (md5 of its target columns as JSON): identical duplicates collapse, and
the result does not depend on arrival order or batching.

SCD type 1 (state per key: sequence, kind, content hash, and for a tombstone when it was written):
    an event is applied iff it orders after the key's last applied one (older or duplicate events
    are ignored and counted); an upsert replaces the row, a delete removes it and leaves a
    tombstone, so an older upsert arriving later does not resurrect the row.
SCD type 2 (operators/scd2.py; state: every applied event of a key): versions are runs of
    upserts with equal tracked columns (`track_history_columns`, or all target columns except the
    keys, the sequence columns and `track_history_except_columns`); a version's row holds the
    latest values of its run, `__start_at` = the run's first sequence, `__end_at` = the next
    version's start or the delete that closed it (NULL while current). A late event recomputes its
    key's history (a version may be split or merged); only changed versions are written.
Tombstones: deletes that remove nothing yet (SCD1: every delete; SCD2: deletes with no open version
    before them) are kept `tombstone_retention` (default 2 days, as Databricks'
    pipelines.cdc.tombstoneGCThresholdInSeconds) of processing time (the batch timestamps, so a redo
    removes the same ones), in the side store state/<id>-tombstones/ indexed by time; after that
    an older upsert for the key applies again.

Output (one row per changed target row): the target columns (+ `__start_at`, `__end_at` for
type 2) and `__action` ("upsert" | "delete"); identity = the keys (type 2: and `__start_at`).
Recovery: state N-1 is loaded and N committed by the engine, so a redo emits the same actions and
the sink's per-batch transaction marker writes them once.
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from state.encoding import decode_key, decode_value, encode_key, encode_value

from ..errors import AnalysisException, MalformedInputError
from ..plan import nodes as n
from ..sql import quote_ident, run_sql
from ..types import state_type_name
from .apply_changes_spec import ALIASES, DEFAULT_TOMBSTONE_RETENTION, ApplyChangesSpec  # noqa: F401 (re-exported)
from .base import BatchContext, PhysicalOp
from .partitioning import partition_sql, split_by_partition
from .scd2 import apply_scd2
from .state_util import side_stores, write_schema_once

ACTION, START, END = "__action", "__start_at", "__end_at"
RESERVED = (ACTION, START, END, "__seq", "__del", "__h", "__p", "__rn")


class ApplyChangesOp(PhysicalOp):
    stateful = True

    def __init__(self, child: PhysicalOp, spec: ApplyChangesSpec, target: list[str]):
        cs = child.schema
        self.spec, self.target = spec, target
        self.keys, self.seq = list(spec.keys), list(spec.sequence_by)
        seq_type = cs.field(self.seq[0]).type if len(self.seq) == 1 else \
            pa.struct([cs.field(c) for c in self.seq])
        fields = [cs.field(c) for c in target]
        if spec.stored_as_scd_type == 2:
            fields += [pa.field(START, seq_type), pa.field(END, seq_type)]
        super().__init__([child], pa.schema(fields + [pa.field(ACTION, pa.string())]))
        self.seq_type = seq_type
        self.key_columns = list(self.keys)
        self.event_time_cols = {}
        if spec.stored_as_scd_type == 2:
            tracked = spec.track_history_columns or [c for c in target if c not in self.keys and c not in self.seq
                                                     and c not in spec.track_history_except_columns]
            self.tracked = [target.index(c) for c in tracked]

    def describe(self) -> str:
        return (f"ApplyChanges[scd{self.spec.stored_as_scd_type}, keys={self.keys}, sequence_by={self.seq}"
                + (f", deletes: {self.spec.apply_as_deletes}" if self.spec.apply_as_deletes else "") + "]")

    def key_fields(self) -> list[tuple[str, str]]:
        cs = self.children[0].schema
        keys = [(k, state_type_name(cs.field(k).type)) for k in self.keys]
        seq = [(c, state_type_name(cs.field(c).type)) for c in self.seq]
        return keys + (seq if self.spec.stored_as_scd_type == 2 else [])

    def value_fields(self) -> list[tuple[str, str]]:
        cs = self.children[0].schema
        meta = [("__kind", "VARCHAR"), ("__hash", "VARCHAR"), ("__created_ms", "BIGINT")]
        if self.spec.stored_as_scd_type == 1:
            return [(c, state_type_name(cs.field(c).type)) for c in self.seq] + meta
        return meta + [(c, state_type_name(cs.field(c).type)) for c in self.target if c not in self.keys]

    def state_functions(self) -> list[str]:
        """The sequencing columns: the state orders each key's changes by them (SCD type 2 does not
        store them in its value schema, so a changed sequence_by would otherwise go unseen)."""
        return [f"sequence_by: {', '.join(self.seq)}"]

    def state_schema(self) -> dict[str, Any]:
        return {"key": self.key_fields(), "value": self.value_fields(), "scd_type": self.spec.stored_as_scd_type,
                "num_keys": len(self.keys)}

    # -- one batch --------------------------------------------------------------------------------
    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        stores = ctx.stores(self)
        tombs = side_stores(ctx, self, "tombstones")
        write_schema_once(self, ctx, self.key_fields(), self.value_fields())
        events = self._events(ctx, table, len(stores))
        metrics = {"num_target_rows_upserted": 0, "num_target_rows_deleted": 0, "num_ignored_changes": 0,
                   "num_tombstones_expired": 0}
        out: list[pa.Table] = []
        for p, part in enumerate(split_by_partition(events, len(stores))):
            if self.spec.stored_as_scd_type == 1:
                actions = self._scd1(ctx, stores[p], tombs[p], part, metrics)
            else:
                actions = apply_scd2(self, ctx, stores[p], tombs[p], part, metrics)
            metrics["num_tombstones_expired"] += self._expire(ctx, stores[p], tombs[p])
            out.append(actions)
        m = ctx.custom_metrics.setdefault(self.operator_id, {})
        for k, v in metrics.items():
            m[k] = m.get(k, 0) + v
        m["num_tombstones"] = m.get("num_tombstones", 0) + sum(_count(t) for t in tombs)
        tables = [t for t in out if t.num_rows]
        return pa.concat_tables(tables) if tables else self.schema.empty_table()

    def _events(self, ctx: BatchContext, table: pa.Table, nparts: int) -> pa.Table:
        """The batch's events with __del, __h (content hash) and __p (state partition), one per
        (key, sequence) for type 2 or per key for type 1, the winner by (sequence, delete, hash)."""
        keys = [quote_ident(k) for k in self.keys]
        seq = [quote_ident(c) for c in self.seq]
        nulls = " OR ".join(f"{c} IS NULL" for c in seq)
        bad = run_sql(f"SELECT * FROM __in WHERE {nulls} LIMIT 1", {"__in": table}) if table.num_rows else None
        if bad is not None and bad.num_rows:
            raise MalformedInputError(ctx.where(
                f"apply_changes: a change has a NULL sequence ({', '.join(self.seq)}): {bad.to_pylist()[0]}. "
                "Every change needs a sequence value; filter such rows out or coalesce the column before "
                "apply_changes"))
        dele = f"coalesce(({self.spec.apply_as_deletes}), false)" if self.spec.apply_as_deletes else "false"
        h = "md5(to_json(struct_pack(" + ", ".join(f"{quote_ident(c)} := {quote_ident(c)}" for c in self.target) + ")))"
        group = keys + (seq if self.spec.stored_as_scd_type == 2 else [])
        order = ", ".join([f"{c} DESC" for c in seq] + ["__del DESC", "__h DESC"])
        sql = (f"SELECT * FROM (SELECT *, {dele} AS __del, {h} AS __h, {partition_sql(keys, nparts)} AS __p "
               f"FROM __in) QUALIFY row_number() OVER (PARTITION BY {', '.join(group)} ORDER BY {order}) = 1 "
               f"ORDER BY {', '.join(keys + seq)}")
        try:
            return run_sql(sql, {"__in": table})
        except Exception as e:
            raise RuntimeError(ctx.where(f"{self.describe()} failed: {e}")) from e

    def _scd1(self, ctx: BatchContext, store: Any, tombs: Any, part: pa.Table, metrics: dict) -> pa.Table:
        if not part.num_rows:
            return self.schema.empty_table()
        key_rows = list(zip(*[part.column(k).to_pylist() for k in self.keys]))
        seqs = list(zip(*[part.column(c).to_pylist() for c in self.seq]))
        dels, hashes = part.column("__del").to_pylist(), part.column("__h").to_pylist()
        kbytes = [encode_key(k) for k in key_rows]
        upserts, deletes = [], []
        now = ctx.timestamp_ms
        for i, (kb, old) in enumerate(zip(kbytes, store.multi_get(kbytes))):
            ns = len(self.seq)
            prev = decode_value(old) if old is not None else None
            new_order = (seqs[i], bool(dels[i]), hashes[i])
            if prev is not None and new_order <= (tuple(prev[:ns]), prev[ns] == "D", prev[ns + 1]):
                metrics["num_ignored_changes"] += 1
                continue
            if prev is not None and prev[ns] == "D":          # a tombstone superseded
                tombs.delete(encode_key((prev[ns + 2],) + key_rows[i]))
            if dels[i]:
                store.put(kb, encode_value(seqs[i] + ("D", hashes[i], now)))
                tombs.put(encode_key((now,) + key_rows[i]), b"")
                if prev is not None and prev[ns] == "U":
                    deletes.append(i)
            else:
                store.put(kb, encode_value(seqs[i] + ("U", hashes[i], None)))
                upserts.append(i)
        metrics["num_target_rows_upserted"] += len(upserts)
        metrics["num_target_rows_deleted"] += len(deletes)
        return self._actions(part, upserts, deletes)

    def _actions(self, part: pa.Table, upserts: list[int], deletes: list[int]) -> pa.Table:
        ups = part.take(pa.array(upserts, pa.int64())).select(self.target)
        ups = ups.append_column(ACTION, pa.array(["upsert"] * len(upserts), pa.string()))
        dl = part.take(pa.array(deletes, pa.int64()))
        cols = [dl.column(f.name) if f.name in self.keys else pa.nulls(len(deletes), f.type) for f in self.schema
                if f.name != ACTION]
        dl = pa.Table.from_arrays(cols + [pa.array(["delete"] * len(deletes), pa.string())], schema=self.schema)
        parts = [t for t in (ups.cast(self.schema), dl) if t.num_rows]
        return pa.concat_tables(parts) if parts else self.schema.empty_table()

    def _expire(self, ctx: BatchContext, store: Any, tombs: Any) -> int:
        """Remove the tombstones written at or before batch timestamp - retention (module doc)."""
        cutoff = ctx.timestamp_ms - self.spec.tombstone_retention_ms
        if cutoff < 0:
            return 0
        # index keys (created_ms, *key[, *sequence]) with created_ms <= cutoff
        expired = [kb for kb, _ in tombs.range_scan(None, encode_key((cutoff + 1,)))]
        for kb in expired:
            rest = decode_key(kb)[1:]
            store.delete(encode_key(rest))
            tombs.delete(kb)
        return len(expired)


def _count(store: Any) -> int:
    try:
        return int(store.metrics().num_rows_total)
    except Exception:  # noqa: BLE001 - a placeholder store (another partition's, fanned out)
        return 0


def target_columns(spec: ApplyChangesSpec, schema: pa.Schema) -> list[str]:
    """The target table's columns (before __start_at / __end_at), refusing what cannot work."""
    names = schema.names
    where = "apply_changes"
    for what, cols in (("keys", spec.keys), ("sequence_by", spec.sequence_by), ("except_columns", spec.except_columns),
                       ("columns", spec.columns or ()), ("track_history_columns", spec.track_history_columns or ()),
                       ("track_history_except_columns", spec.track_history_except_columns)):
        missing = [c for c in cols if c not in names]
        if missing:
            raise AnalysisException(f"{where}: {what} {missing} not among the input's columns {names}")
    clash = [c for c in names if c in RESERVED]
    if clash:
        raise AnalysisException(f"{where}: the input has columns {clash}, names AUTO CDC reserves; rename them")
    target = [c for c in (spec.columns or names) if c not in spec.except_columns]
    lost = [k for k in spec.keys if k not in target]
    if lost:
        raise AnalysisException(f"{where}: the keys {lost} must be target columns (not in except_columns, and in "
                                "columns when given)")
    for c in spec.sequence_by:
        t = schema.field(c).type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t) or pa.types.is_date(t)
                or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_decimal(t)):
            raise AnalysisException(f"{where}: sequence_by column {c!r} is {t}; use a number, timestamp, date or "
                                    "string column (or several, compared in order)")
    if spec.track_history_columns:
        bad = [c for c in spec.track_history_columns if c not in target or c in spec.keys]
        if bad:
            raise AnalysisException(f"{where}: track_history_columns {bad} must be non-key target columns")
    return target


def build_apply_changes(compiler: Any, node: n.ApplyChanges) -> PhysicalOp:
    child = compiler.build(node.child)
    spec = node.spec
    target = target_columns(spec, child.schema)
    if spec.apply_as_deletes:
        try:
            t = run_sql(f"SELECT ({spec.apply_as_deletes}) AS d FROM __in",
                        {"__in": child.schema.empty_table()}).schema.field(0).type
        except Exception as e:
            raise AnalysisException(f"apply_changes: apply_as_deletes {spec.apply_as_deletes!r}: {e} "
                                    f"(input columns: {child.schema.names})") from e
        if not (pa.types.is_boolean(t) or pa.types.is_null(t)):
            raise AnalysisException(f"apply_changes: apply_as_deletes {spec.apply_as_deletes!r} is {t}, not a "
                                    "boolean")
    op = ApplyChangesOp(child, spec, target)
    compiler.next_operator_id(op)
    op.operator_name = "applyChanges"
    return op

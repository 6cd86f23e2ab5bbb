"""Late-data side output: `with_watermark(col, delay, late_rows=inc.dead_letter.delta(path))`.

Every input row a stateful operator drops as late (behind its input watermark of the previous
batch, SEMANTICS.md rules 4-5) is appended to the Delta table at `path`, with:

    batch_id, operator (e.g. "dedupe"), operator_id, side ("left"/"right" for a stream-stream
    join, else null), watermark (the operator's late-row watermark that dropped the row),
    query_id, query_name, written_at, then the operator's input columns (a column named like one
    of these is stored as input_<name>)

Exactly once per batch: one Delta commit per (operator, batch), carrying the app transaction
app_id = "increments-late-rows:<query id>:<operator id>" (":p<partition>" when the process step
runs per state partition), version = batch id. The process step, where operators run, is redone
after a crash before commits[N]; the redo drops the same rows (same input, same state N-1), finds
the table's transaction version for its app id >= N and writes nothing. The table's schema is
merged on write (schema_mode="merge"), so operators of different input shapes may share one table.
"""
from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
META = pa.schema([("batch_id", pa.int64()), ("operator", pa.string()), ("operator_id", pa.string()),
                  ("side", pa.string()), ("watermark", TS), ("query_id", pa.string()),
                  ("query_name", pa.string()), ("written_at", TS)])


def app_id(ctx: Any, op: Any) -> str:
    qid = getattr(ctx, "query_id", "") or ctx.query_name
    part = getattr(getattr(ctx, "state", None), "partition", None)
    return f"increments-late-rows:{qid}:{op.operator_id}" + (f":p{part}" if part is not None else "")


def _plain(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Delta has no unsigned / nanosecond / large types: cast the few that deltalake refuses."""
    t = col.type
    if pa.types.is_timestamp(t) and t.unit != "us":
        return col.cast(pa.timestamp("us", tz=t.tz))
    return col


def side_table(ctx: Any, op: Any, rows: pa.Table, watermark_ms: int, side: str | None) -> pa.Table:
    n = rows.num_rows
    now = int(time.time() * 1_000_000)
    meta = [pa.array([ctx.batch_id] * n, pa.int64()), pa.array([op.operator_name or op.describe()] * n, pa.string()),
            pa.array([op.operator_id] * n, pa.string()), pa.array([side] * n, pa.string()),
            pa.array([int(watermark_ms) * 1000] * n, pa.int64()).cast(TS),
            pa.array([getattr(ctx, "query_id", "") or None] * n, pa.string()),
            pa.array([ctx.query_name] * n, pa.string()), pa.array([now] * n, pa.int64()).cast(TS)]
    names = list(META.names)
    cols = list(meta)
    for name in rows.column_names:
        if name.startswith("__"):
            continue
        names.append(f"input_{name}" if name in META.names else name)
        cols.append(_plain(rows.column(name)))
    return pa.table(cols, names=names)


def write(target: Any, ctx: Any, op: Any, parts: list[tuple[str | None, pa.Table]], watermark_ms: int) -> int:
    """Append one operator's late rows of this batch to `target` (a DeltaDeadLetter) once; returns
    how many rows the batch sends there (also when a redo finds them already written)."""
    from .delta import append_once  # noqa: PLC0415 - one branch: only late rows written to a Delta table need deltalake (increments.sinks.delta)
    tables = [side_table(ctx, op, rows, watermark_ms, side) for side, rows in parts if rows.num_rows]
    if not tables:
        return 0
    table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    append_once(target.path, table, app_id(ctx, op), ctx.batch_id, target.options(ctx), schema_mode="merge")
    return table.num_rows

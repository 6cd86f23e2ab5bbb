"""Quarantine side output of expectations: `frame.expect(name, cond, on_violation="drop",
quarantine=inc.dead_letter.delta(path))`.

Every row an expectation drops is appended to the Delta table at `path`, with:

    batch_id, expectation (the first dropping expectation it failed, in declaration order),
    failed_expectations (every expectation of that expect / expect_all call it failed),
    operator_id, query_id, query_name, written_at, then the row's columns (a column named like one
    of these is stored as input_<name>)

Exactly once per batch, as the late-rows table: one Delta commit per (expectation operator, batch)
carrying the app transaction app_id = "increments-quarantine:<query id>:<operator id>", version =
batch id. Expectations run in the process step, which a crash before commits[N] repeats with the
same input (and, above a stateful operator, the same state N-1): the redo drops the same rows,
finds the table's transaction version for its app id >= N and writes nothing. (An operator with a
quarantine is not fanned out per state partition: execution/partitioned.py, `dead_letter`.)
The table's schema is merged on write, so several expectations may share one table.
"""
from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

from .late_rows import _plain

TS = pa.timestamp("us", tz="UTC")
META = pa.schema([("batch_id", pa.int64()), ("expectation", pa.string()),
                  ("failed_expectations", pa.list_(pa.string())), ("operator_id", pa.string()),
                  ("query_id", pa.string()), ("query_name", pa.string()), ("written_at", TS)])


def app_id(ctx: Any, op: Any) -> str:
    return f"increments-quarantine:{getattr(ctx, 'query_id', '') or ctx.query_name}:{op.operator_id}"


def quarantine_table(ctx: Any, op: Any, rows: pa.Table, first: list[str], failed: list[list[str]]) -> pa.Table:
    n = rows.num_rows
    now = int(time.time() * 1_000_000)
    cols = [pa.array([ctx.batch_id] * n, pa.int64()), pa.array(first, pa.string()),
            pa.array(failed, pa.list_(pa.string())), pa.array([op.operator_id] * n, pa.string()),
            pa.array([getattr(ctx, "query_id", "") or None] * n, pa.string()),
            pa.array([ctx.query_name] * n, pa.string()), pa.array([now] * n, pa.int64()).cast(TS)]
    names = list(META.names)
    for name in rows.column_names:
        names.append(f"input_{name}" if name in META.names else name)
        cols.append(_plain(rows.column(name)))
    return pa.table(cols, names=names)


def write(target: Any, ctx: Any, op: Any, rows: pa.Table, first: list[str], failed: list[list[str]]) -> int:
    """Append the rows `op` dropped in this batch to `target` (a DeltaDeadLetter) once; returns how
    many rows the batch sends there (also when a redo finds them already written)."""
    from .delta import append_once  # noqa: PLC0415 - one branch: only quarantined rows written to a Delta table need deltalake (increments.sinks.delta)
    if rows.num_rows == 0:
        return 0
    append_once(target.path, quarantine_table(ctx, op, rows, first, failed), app_id(ctx, op), ctx.batch_id,
                target.options(ctx), schema_mode="merge")
    return rows.num_rows

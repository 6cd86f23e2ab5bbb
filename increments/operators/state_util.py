"""State-store helpers shared by the stateful operators (aggregate, session_window, dedup,
transform_with_state). Partitioning is operators/partitioning.py, state keys and values as Arrow
are operators/key_codec.py, type names are increments/types.py.

Contracts:
- `side_stores(ctx, op, suffix)`: a second set of per-partition stores of the same operator (an
  index, e.g. sessions by end time) opened at batch_id - 1 like ctx.stores(op) and committed or
  aborted with them by the engine; it lives under state/<operator id>-<suffix>/ and is not part of
  the operator's reported metrics (those are the primary stores').
- `write_schema_once(op, ctx, key_fields, value_fields)`: state/<operator id>/_schema.json, written
  by the first batch an operator object runs (state/schema.py: create-only, same content).
"""
from __future__ import annotations

from typing import Any

from state.schema import write_state_schema


def side_stores(ctx: Any, op: Any, suffix: str) -> list:
    return ctx.state.stores_for(f"{op.operator_id}-{suffix}", ctx.batch_id)


def write_schema_once(op: Any, ctx: Any, key_fields: list, value_fields: list) -> None:
    if op._schema_written:
        return
    write_state_schema(ctx.state.checkpoint, op.operator_id, key_fields, value_fields)
    op._schema_written = True

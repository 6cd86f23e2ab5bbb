"""Dead-letter targets for parse_json: `inc.dead_letter.delta(path)`.

    clicks = inc.read_stream.kafka(...).parse_json(schema, dead_letter=inc.dead_letter.delta("lake/dlq"))

Rows whose value is not valid JSON (or has a wrongly typed field) are appended to the Delta table
with columns: value (binary), value_text (the value as UTF-8 text, invalid bytes replaced), topic,
partition, offset, timestamp (null when the input has no such column), reason, query_name,
batch_id, written_at. The good rows of the batch go on through the query.

Idempotency: the commit carries the Delta app transaction (app_id "increments-dead-letter:<query
id>", version = batch id: a new checkpoint is a new query id, so a query that keeps its name but
starts again on a new checkpoint writes its bad rows too). parse_json runs in the process step, which a crash before commits[N]
repeats; a batch whose id the table already holds is not written again, so each bad row is written
once. `write` returns the number of bad rows of the batch (also on such a skip) for progress.

Where: a local path or a URL (s3://, gs://, az://, abfss://, file://; an unknown scheme is refused
when the target is made). deltalake gets this target's storage_options over the query-level ones
(the batch context's `storage_options`, when the engine provides them).
"""
from __future__ import annotations

import functools
import os
import time
from typing import Any

from ..lazy import lazy_module

from .. import storage

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py

@functools.cache
def dead_letter_schema() -> pa.Schema:
    """The dead-letter table's columns (built at first use: pyarrow loads then)."""
    return pa.schema([("value", pa.binary()), ("value_text", pa.string()), ("topic", pa.string()),
                      ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
                      ("reason", pa.string()), ("query_name", pa.string()), ("batch_id", pa.int64()),
                      ("written_at", pa.timestamp("us", tz="UTC"))])


class DeltaDeadLetter:
    def __init__(self, path: str, value_column: str = "value", storage_options: dict | None = None):
        path = os.fspath(path)
        storage.check_scheme(path, "dead_letter.delta: path")
        self.path = path.rstrip("/") if storage.scheme_of(path) else os.path.abspath(path)
        self.value_column = value_column
        self.storage_options = dict(storage_options or {})
        storage.remember_secrets(self.storage_options)

    @property
    def description(self) -> str:
        return f"DeadLetterDelta[{storage.redact_url(self.path)}]"

    def options(self, ctx: Any) -> dict | None:
        """This target's storage_options over the query's (ctx.storage_options, if any)."""
        return {**(getattr(ctx, "storage_options", None) or {}), **self.storage_options} or None

    def __repr__(self) -> str:
        return self.description

    def rows(self, ctx: Any, bad_rows: pa.Table, reasons: pa.Array) -> pa.Table:
        n = bad_rows.num_rows
        names = bad_rows.column_names
        col = self.value_column if self.value_column in names else names[0]
        raw = bad_rows.column(col).to_pylist()
        value = [v if isinstance(v, (bytes, type(None))) else str(v).encode() for v in raw]
        text = [None if v is None else v.decode("utf-8", "replace") for v in value]

        def opt(name: str, typ: pa.DataType) -> pa.Array:
            return bad_rows.column(name).cast(typ) if name in names else pa.nulls(n, typ)
        now = int(time.time() * 1_000_000)
        return pa.table([pa.array(value, pa.binary()), pa.array(text, pa.string()), opt("topic", pa.string()),
                         opt("partition", pa.int32()), opt("offset", pa.int64()),
                         opt("timestamp", pa.timestamp("us", tz="UTC")), pa.array(reasons, pa.string()),
                         pa.array([ctx.query_name] * n, pa.string()), pa.array([ctx.batch_id] * n, pa.int64()),
                         pa.array([now] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC"))], schema=dead_letter_schema())

    def write(self, ctx: Any, bad_rows: pa.Table, reasons: pa.Array) -> int:
        """Append the batch's bad rows once per (query, batch); returns how many bad rows it had."""
        from .delta import append_once  # noqa: PLC0415 - increments.sinks.delta (deltalake, numpy, pyarrow): kept off the code location's import path
        if bad_rows.num_rows == 0:
            return 0
        app_id = f"increments-dead-letter:{getattr(ctx, 'query_id', '') or ctx.query_name}"
        append_once(self.path, self.rows(ctx, bad_rows, reasons), app_id, ctx.batch_id, self.options(ctx))
        return bad_rows.num_rows


def delta(path: str, value_column: str = "value", storage_options: dict | None = None) -> DeltaDeadLetter:
    """A dead-letter Delta table at `path` for parse_json(..., dead_letter=...)."""
    return DeltaDeadLetter(path, value_column, storage_options)

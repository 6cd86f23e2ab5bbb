"""The parse_json operator: a JSON column parsed by DuckDB's json_transform over the whole column
(a stateless operator, as those of stateless.py); bad rows fail the batch (or go to the dead-letter
table), named by topic/partition/offset when the input carries them. A Kafka source may have
parsed the values while reading (sources/kafka/parse.py): taken when it is exactly that table.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from ..errors import MalformedInputError
from ..sources.file_formats import first_bad_json_row, has_wrong_json_types
from ..sql import duckdb_connection, quote_ident, run_sql
from ..nested_json import json_to_sql
from ..types import Schema, is_nested
from .base import BatchContext, PhysicalOp
from .stateless import ScanOp


def _binary_as_text(con, values: pa.Array) -> pa.Array:
    """Binary values as UTF-8 text (zero-copy when valid). A value that is not valid UTF-8 becomes
    a text that is not JSON ("\\x00invalid UTF-8: ..."), so parse_json reports or dead-letters it."""
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        sql = ("SELECT CASE WHEN v IS NOT NULL AND try(decode(v)) IS NULL THEN chr(0) || 'invalid UTF-8: ' || "
               "decode(v, 'replace') ELSE decode(v) END AS v FROM __bin")
        return run_sql(sql, {"__bin": pa.table({"v": values.cast(pa.binary())})}, con).column("v").combine_chunks()


def _one_object_per_value(texts) -> bool:
    """Is every value non-null, starting with '{' and ending with '}' (nothing around them)?

    Then, in the values joined by newlines, no JSON value can span two of them: a string cannot
    hold the raw newline (the parser rejects control characters in strings), and between tokens a
    '}' that ends a value followed by the '{' that starts the next value is valid only at the top
    level. So every value yields at least one parsed row, and n rows for n values means exactly one
    each, in order. (Without it, a blank value beside a value holding two objects adds up too.)"""
    n = len(texts)
    large = pa.types.is_large_string(texts.type)
    if not (large or pa.types.is_string(texts.type)) or n == 0 or texts.null_count or texts.buffers()[2] is None:
        return False
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64 if large else np.int32, count=n + 1,
                            offset=texts.offset * (8 if large else 4))
    data = np.frombuffer(texts.buffers()[2], dtype=np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    return (bool(((ends - starts) >= 2).all()) and bool((data[starts] == 0x7B).all())
            and bool((data[ends - 1] == 0x7D).all()))


class ParseJsonOp(PhysicalOp):
    """parse_json: json_transform in DuckDB over the whole column; bad rows fail the batch (or go to
    the dead-letter table), named by topic/partition/offset when the input carries them."""

    def __init__(self, child: PhysicalOp, schema: Schema, column: str, keep: tuple[str, ...], dead_letter: Any,
                 out_schema: pa.Schema):
        super().__init__([child], out_schema)
        self.json_schema, self.column, self.keep, self.dead_letter = schema, column, keep, dead_letter
        self._arrow_json = schema.to_arrow()
        # right on a Kafka scan's value column: the source parses the values while it consumes the
        # next ones (sources/kafka.py, take_parsed); checked here like the fast path's own parse
        self._kafka = None
        # pyarrow's JSON reader converts nested values by its own rules (and reads no MAP): nested
        # schemas take the DuckDB path only (nested_json.py: Spark's rules)
        self._nested = any(is_nested(f.duckdb_type) for f in schema.fields)
        if (column == "value" and not self._nested and isinstance(child, ScanOp)
                and hasattr(child.source, "parse_values_as")):
            self._kafka = child.source
            self._kafka.parse_values_as(self._arrow_json)

    def columns_read(self, needed: set[str] | None) -> set[str]:
        """The text column, the kept ones, what names a bad row (topic, partition, offset) and,
        with a dead-letter target, what it records (timestamp)."""
        cols = {self.column, *self.keep, "topic", "partition", "offset"}
        return cols | ({"timestamp"} if self.dead_letter is not None else set())

    def execute(self, ctx: BatchContext) -> pa.Table:
        table = self.children[0].execute(ctx)
        if table.num_rows == 0:   # what the DuckDB path returns for no rows, without its ~3 ms query
            return self.schema.empty_table()
        pre = self._kafka.take_parsed(table, self._arrow_json) if self._kafka is not None else None
        if pre is not None:
            fast = self._parsed_while_reading(table, pre)
            if fast is not None:
                return fast
        con = duckdb_connection()
        texts = table.column(self.column)
        texts = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
        if pa.types.is_binary(texts.type) or pa.types.is_large_binary(texts.type):
            texts = _binary_as_text(con, texts)
        fast = self._arrow_fast_path(table, texts) if pre is None and not self._nested else None   # pre failed: so would this
        if fast is not None:
            return fast
        if table.num_rows == 0 or self._all_objects(con, texts):  # fast path: one validity pass + the transform
            parsed = self._transform(con, table, texts)
            if table.num_rows == 0 or not (self._type_errors(con, texts, parsed)
                                           or has_wrong_json_types(con, texts, self.json_schema)):
                return parsed
        bad = first_bad_json_row(con, texts, self.json_schema) if table.num_rows else None
        if bad is not None:
            if self.dead_letter is None:
                raise MalformedInputError(ctx.where(
                    f"parse_json({self.column!r}): {self._locate(table, bad[0])}: {bad[1]}. Fix the producer, or "
                    "route bad rows with parse_json(..., dead_letter=inc.dead_letter.delta(path)); nothing of this batch "
                    "was processed."))
            table = self._route_dead_letters(ctx, con, table, texts)
            texts = table.column(self.column).combine_chunks()
            if pa.types.is_binary(texts.type) or pa.types.is_large_binary(texts.type):
                texts = _binary_as_text(con, texts)
        parsed = self._transform(con, table, texts)
        return parsed

    def _parsed_while_reading(self, table: pa.Table, pre: list) -> pa.Table | None:
        """The Kafka source's parse of this very table, done piece by piece while it was read (a list
        of (values, parsed piece or None)), when it provably holds exactly one row per value: every
        piece parsed into as many rows as it had values, and every value is valid UTF-8 and one
        object (_one_object_per_value). Else None: the exact path decides."""
        column = table.column(self.column)
        chunks = [c for c in (column.chunks if isinstance(column, pa.ChunkedArray) else [column]) if len(c)]
        n = sum(len(c) for c in chunks)
        if not n or sum(k for k, _ in pre) != n or any(t is None or t.num_rows != k for k, t in pre):
            return None
        try:   # per chunk: no copy of the whole column; invalid UTF-8 raises (pyarrow's parser does not check)
            texts = [c.cast(pa.string()) if pa.types.is_binary(c.type) else c for c in chunks]
        except pa.ArrowInvalid:
            return None
        if not all(_one_object_per_value(t) for t in texts):
            return None
        return self._with_kept(table, pa.concat_tables([t for _, t in pre]))

    def _arrow_fast_path(self, table: pa.Table, texts) -> pa.Table | None:
        """Parse the whole column as one JSON-lines buffer with pyarrow's multithreaded reader.

        Only taken when it provably parsed every value into exactly one row (_one_object_per_value
        and the row count); anything unusual (a null or blank value, a value spanning lines, a
        wrong type, invalid JSON) returns None and the DuckDB path, which can name the bad row,
        decides."""
        n = len(texts)
        if not _one_object_per_value(texts):
            return None
        if int(pc.sum(pc.binary_length(texts)).as_py() or 0) + n >= (1 << 31) - 1:
            texts = texts.cast(pa.large_string())
        buf = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), texts), "\n")[0].as_buffer()
        try:
            opts = pajson.ParseOptions(explicit_schema=self._arrow_json, unexpected_field_behavior="ignore")
            parsed = pajson.read_json(pa.BufferReader(buf), parse_options=opts,
                                      read_options=pajson.ReadOptions(block_size=max(1 << 20, min(buf.size + 1, 64 << 20))))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
        if parsed.num_rows != n:
            return None
        return self._with_kept(table, parsed)

    def _with_kept(self, table: pa.Table, parsed: pa.Table) -> pa.Table:
        cols = {f.name: parsed.column(f.name) for f in self.json_schema.fields}
        cols.update({k: table.column(k) for k in self.keep})
        return pa.table(cols).cast(self.schema)

    def _transform(self, con, table: pa.Table, texts) -> pa.Table:
        keep = {k: table.column(k) for k in self.keep}
        t = pa.table({"__v": texts, **keep})
        def col(f) -> str:
            if is_nested(f.duckdb_type):   # read as JSON, converted by Spark's rules (nested_json.py)
                return f"{json_to_sql('__s.' + quote_ident(f.name), f.duckdb_type)} AS {quote_ident(f.name)}"
            return f"__s.{quote_ident(f.name)} AS {quote_ident(f.name)}"
        cols = ", ".join(col(f) for f in self.json_schema.fields)
        structure = json.dumps({f.name: "JSON" if is_nested(f.duckdb_type) else f.duckdb_type
                                for f in self.json_schema.fields})
        kept = "".join(f", {quote_ident(k)}" for k in self.keep)
        sql = (f"SELECT {cols}{kept} FROM (SELECT json_transform(CASE WHEN trim(__v) = '' THEN NULL ELSE __v END, "
               f"'{structure.replace(chr(39), chr(39) * 2)}') AS __s{kept} "
               f"FROM __pj)")
        out = run_sql(sql, {"__pj": t}, con)
        return out.cast(self.schema)

    @staticmethod
    def _all_objects(con, texts) -> bool:
        """True when every non-blank value is a valid JSON object (one pass over the column)."""
        sql = ("SELECT count(*) FROM __ao WHERE v IS NOT NULL AND trim(v) <> '' AND "
               "CASE WHEN json_valid(v) THEN json_type(v) <> 'OBJECT' ELSE true END")
        return run_sql(sql, {"__ao": pa.table({"v": texts})}, con).column(0)[0].as_py() == 0

    def _type_errors(self, con, texts, parsed: pa.Table) -> bool:
        """Did any field come out NULL where the JSON holds a non-null value (a wrongly typed field)?
        Only fields with NULLs are checked, and only on those rows."""
        for f in self.json_schema.fields:
            col = parsed.column(f.name)
            if col.null_count == 0 or is_nested(f.duckdb_type):   # nested: NULL when it does not convert
                continue
            rows = texts.filter(pc.is_null(col).combine_chunks() if isinstance(col, pa.ChunkedArray) else pc.is_null(col))
            path = "$." + f.name if f.name.isidentifier() else "$." + json.dumps(f.name)
            sql = ("SELECT count(*) FROM __te WHERE v IS NOT NULL AND trim(v) <> '' "
                   f"AND coalesce(json_type(v, '{path.replace(chr(39), chr(39) * 2)}'), 'NULL') <> 'NULL'")
            if run_sql(sql, {"__te": pa.table({"v": rows})}, con).column(0)[0].as_py():
                return True
        return False

    def _locate(self, table: pa.Table, row: int) -> str:
        names = table.column_names
        if {"topic", "partition", "offset"} <= set(names):
            return (f"topic {table.column('topic')[row].as_py()}, partition {table.column('partition')[row].as_py()}, "
                    f"offset {table.column('offset')[row].as_py()}")
        return f"row {row} of the batch"

    def _route_dead_letters(self, ctx: BatchContext, con, table: pa.Table, texts) -> pa.Table:
        """Split off every bad row, hand them to the dead-letter target, return the good ones."""
        reasons = []
        # one diagnosis query per bad row (bad rows are rare); each pass removes the row it found
        ok = np.ones(table.num_rows, dtype=bool)
        remaining = texts
        idx = np.arange(table.num_rows)
        while True:
            bad = first_bad_json_row(con, remaining, self.json_schema)
            if bad is None:
                break
            ok[idx[bad[0]]] = False
            reasons.append((int(idx[bad[0]]), bad[1]))
            keep_mask = np.ones(len(remaining), dtype=bool)
            keep_mask[bad[0]] = False  # only this row: first_bad_json_row checks JSON validity before types
            remaining = remaining.filter(pa.array(keep_mask))
            idx = idx[keep_mask]
        bad_rows = table.filter(pa.array(~ok))
        reason_col = pa.array([r for _, r in sorted(reasons)], pa.string())
        n = self.dead_letter.write(ctx, bad_rows, reason_col)
        ctx.dead_letters[self.dead_letter.description] = ctx.dead_letters.get(self.dead_letter.description, 0) + n
        return table.filter(pa.array(ok))

    def describe(self) -> str:
        return f"ParseJson({self.column}: {self.json_schema})"

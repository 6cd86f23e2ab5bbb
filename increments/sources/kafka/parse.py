"""parse_json on a Kafka source's value column, while it is read (see the package docstring).

ParseJsonOp calls parse_values_as(schema); the local runner calls enable_read_ahead(). read()
(consume.py) then hands each piece of values (an Arrow binary array of about 2 MiB) to a pool of
_PARSE_THREADS worker threads (_parse_piece: Arrow's binary_join and pyarrow's JSON reader, neither
holds the GIL) while it consumes the next messages, and keeps the pieces' futures for the table it
returned (_Parsed). take_parsed hands them over once, only for that very table; ParseJsonOp checks
them (one row per value) and otherwise takes its own exact path.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

#: parse threads: two, so that once the last messages are consumed the pieces still queued are
#: parsed on both cores (while consuming, the consumer and librdkafka take about one core)
_PARSE_THREADS = 2

#: a piece of at most this many bytes of values is parsed on the reading thread, at once: for a
#: small batch's few messages, handing them to a worker and waiting for it at take_parsed costs
#: more wall than the parse itself (a thread's wake-up on a busy machine)
INLINE_PARSE_BYTES = 64 << 10


def _parse_piece(values: pa.Array, options: Any) -> pa.Table | None:
    """One piece of values (an Arrow binary array) joined with newlines by Arrow and parsed by
    pyarrow's JSON reader (worker thread; both release the GIL). None when anything fails (invalid
    JSON, a wrong type): ParseJsonOp then takes its exact path, which names the bad row."""
    try:
        n = len(values)
        buf = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), values), b"\n")[0].as_buffer()
        return pajson.read_json(pa.BufferReader(buf), parse_options=options, read_options=pajson.ReadOptions(
            use_threads=False, block_size=min(buf.size + 1, 64 << 20)))   # one block: no 1 MiB one for 50 values
    except Exception:  # noqa: BLE001 - any failure means "no pre-parse"; the exact path decides
        return None


def _result(future: Any) -> pa.Table | None:
    try:
        return future.result()
    except Exception:  # noqa: BLE001 - cancelled by close(), say: no pre-parse
        return None


class _Parsed:
    """The pre-parse of one read(): the table it returned (matched by identity) and (messages,
    future of the parsed piece) per piece, in the order of the table's rows."""
    __slots__ = ("table", "schema", "pieces")

    def __init__(self, table: pa.Table, schema: pa.Schema, pieces: list):
        self.table, self.schema, self.pieces = table, schema, pieces


class KafkaParse:
    """KafkaSource's parse-while-reading half (state: _parse_schema, _parse_options,
    _parse_while_reading, _parsed, _pool; set in KafkaSource.__init__)."""

    def parse_values_as(self, json_schema: pa.Schema) -> None:
        """parse_json(json_schema) reads this source's value column: from now on read() also parses
        the values on worker threads while it consumes the next ones (see take_parsed)."""
        self._parse_schema = json_schema
        self._parse_options = pajson.ParseOptions(explicit_schema=json_schema, unexpected_field_behavior="ignore")

    def enable_read_ahead(self, columns: list[str] | None = None) -> None:
        """The local runner processes the rows it reads in this process: parse while reading pays
        off. (A Dagster read op stages the raw rows for another process: it never calls this.)"""
        self._parse_while_reading = True

    def take_parsed(self, table: pa.Table, json_schema: pa.Schema) -> list[tuple[int, pa.Table | None]] | None:
        """The pre-parse of `table` (the very object the last read() returned) as a list of
        (messages, parsed piece or None when that piece failed), in row order; None if there is
        none for it. Handed over once. The caller checks it (one row per message) before using it."""
        p = self._parsed
        if p is None or p.table is not table or not p.schema.equals(json_schema):
            return None
        self._parsed = None
        return [(n, _result(f)) for n, f in p.pieces]

    def _hand_to_parse(self, piece: pa.Array) -> tuple[int, Any]:
        """(messages, future of the parsed piece): parsed by a worker thread, or right here (a
        completed future) when the piece is small (INLINE_PARSE_BYTES)."""
        if piece.nbytes <= INLINE_PARSE_BYTES:
            done = Future()
            done.set_result(_parse_piece(piece, self._parse_options))
            return len(piece), done
        return len(piece), self._parse_pool().submit(_parse_piece, piece, self._parse_options)

    def _parse_pool(self):
        if self._pool is None:
            self._pool = ThreadPoolExecutor(_PARSE_THREADS, thread_name_prefix="increments-kafka-parse")
        return self._pool

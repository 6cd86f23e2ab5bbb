"""read_stream.kafka(...): a replayable Kafka source on confluent-kafka, read by partition and offset.

Offsets are Spark's JSON: {"topic": {"0": 42, "1": 7}}, each number the NEXT offset to read in
that partition. `read(start, end)` returns exactly the records with start[p] <= offset < end[p] of
every partition (a partition missing from `start` starts at 0, as a partition added to the topic).
Consumer groups are never used: no commits, no rebalances; the log's offsets are the only truth.

Columns (as Spark): key, value (binary), topic (string), partition (int32), offset (int64),
timestamp (timestamp[us, UTC]).

Contracts:
- starting_offsets: "earliest", "latest" or {"topic": {"0": 23, "1": -2}} (-2 earliest, -1 latest);
  resolved at the first plan and kept in sources/<index>/initial.json so a restart before batch 0
  committed anything starts from the same place.
- max_offsets_per_trigger is split over partitions in proportion to their backlog (Spark's rule:
  each gets floor(limit * backlog / total), at least 1 when it has a backlog).
- Data loss (fail_on_data_loss=True, the default): an offset the batch needs that the broker no
  longer has (below the low watermark, or beyond the end after a topic was recreated) fails the
  batch with a DataLossError naming topic, partition and the missing range. With False the range
  is skipped, counted in `read_metrics["offsets_skipped"]` and logged.
- Replay: read(start, end) with the same offsets returns the same rows as long as the broker still
  holds them (otherwise the data-loss rule applies).
- Broker round trips: the end of a partition is probed with one fetch from the logical end (the
  plan's latest_offset, prepare_available_now, backlog; initial_offset only for "latest"; under
  AvailableNow latest_offset uses the ends prepare_available_now probed, as Spark does). read()
  does not probe: loss is detected while consuming (end-of-partition before the range's end; out of
  range, or no answer within 1 s, at its start -> probe that partition, then the rule above).
- parse_json right on the value column (ParseJsonOp calls `parse_values_as`): while a batch is
  read, the values are also parsed as JSON lines on a worker thread, in pieces of about 2 MiB, as
  the next messages are consumed; the result is only handed to ParseJsonOp (`take_parsed`) for the
  very table read() returned, which checks it and otherwise takes its own exact path. The table
  read() returns is the same with or without it. Only in the local runner (enable_read_ahead): a
  Dagster read op stages the raw rows for another process, which parses them itself.
"""
from __future__ import annotations

import json
import logging
import math
import operator
import time
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import DataLossError
from .base import Source

log = logging.getLogger("increments.sources.kafka")

SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                    ("partition", pa.int32()), ("offset", pa.int64()),
                    ("timestamp", pa.timestamp("us", tz="UTC"))])
_EARLIEST, _LATEST = -2, -1
_second = operator.itemgetter(1)
_CHUNK = 500       # messages per consume() call at most (see _consume_step)
_PARSE_BYTES = 2 << 20   # values handed to the parse thread in pieces of about this size
_STALL_S = 1.0     # no answer at all this long after assign -> probe the partition's (low, high)


def _binary_array(values: list, lens: list | None) -> pa.Array:
    """values (bytes) as one Arrow binary array: one b"".join and the lengths' running sum (no
    per-value conversion). lens None (a null among the values) or more than 2 GiB: pa.array."""
    total = sum(int(x.sum()) for x in lens) if lens is not None else 0
    if lens is None or total >= (1 << 31) - 1:
        return pa.array(values, pa.binary())
    offsets = np.zeros(len(values) + 1, np.int32)
    if values:
        np.cumsum(np.concatenate(lens), out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(values), [None, pa.py_buffer(offsets),
                                                            pa.py_buffer(b"".join(values))])


def _parse_piece(values: pa.Array, options: Any) -> pa.Table | None:
    """One piece of values (an Arrow binary array) joined with newlines by Arrow and parsed by
    pyarrow's JSON reader (worker thread; both release the GIL). None when anything fails (invalid
    JSON, a wrong type): ParseJsonOp then takes its exact path, which names the bad row."""
    import pyarrow.compute as pc
    import pyarrow.json as pajson
    try:
        n = len(values)
        buf = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), values), b"\n")[0].as_buffer()
        return pajson.read_json(pa.BufferReader(buf), parse_options=options, read_options=pajson.ReadOptions(
            use_threads=False, block_size=max(1 << 20, min(buf.size + 1, 64 << 20))))
    except Exception:  # noqa: BLE001 - any failure means "no pre-parse"; the exact path decides
        return None


def _consume_step() -> int:
    """Messages per consume(): fewer than the cyclic GC's first threshold (700 allocations by default).
    Message objects are tracked by the GC; with tens of thousands alive at once (one large consume()
    chunk) every collection traverses them again and promotes them, and the full collections that
    follow traverse the whole heap: measured a third of the read time at 20k messages per call, and
    no collection at all when each small chunk is dropped before the next call."""
    import gc
    first = gc.get_threshold()[0]
    return _CHUNK if first <= 0 else min(_CHUNK, max(50, first - 200))


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


class KafkaSource(Source):
    _per_query = {"read_metrics": {}, "_consumer": None, "_target": None, "_parse_schema": None,
                  "_parse_options": None, "_parse_while_reading": False, "_parsed": None, "_pool": None,
                  "_admin": None, "_epochs": None}

    def __init__(self, bootstrap_servers: str, topic: str | None = None, topics: Any = None,
                 starting_offsets: Any = "earliest", max_offsets_per_trigger: int | None = None,
                 fail_on_data_loss: bool = True, **client_config: Any):
        names: list[str] = []
        for t in ([topic] if topic else []) + (list(topics) if isinstance(topics, (list, tuple)) else
                                                (topics.split(",") if topics else [])):
            if t and t.strip() not in names:
                names.append(t.strip())
        if not names:
            raise ValueError("read_stream.kafka: name a topic (topic='clicks') or topics=['a', 'b']")
        self.bootstrap_servers = bootstrap_servers
        self.topics = names
        self.starting_offsets = _starting_offsets(starting_offsets, names)
        if max_offsets_per_trigger is not None and int(max_offsets_per_trigger) < 1:
            raise ValueError("max_offsets_per_trigger must be >= 1")
        self.max_offsets_per_trigger = int(max_offsets_per_trigger) if max_offsets_per_trigger else None
        self.fail_on_data_loss = str(fail_on_data_loss).lower() not in ("false", "0", "no")
        self.fetch_timeout_s = float(client_config.pop("fetch_timeout_ms", 60_000)) / 1000
        self.client_config = {k.replace("_", "."): v for k, v in client_config.items()}
        self.read_metrics: dict[str, Any] = {}
        self._consumer = None
        self._target: dict | None = None
        self._parse_schema: pa.Schema | None = None   # set by parse_json on the value column
        self._parse_options: Any = None
        self._parse_while_reading = False         # enable_read_ahead: the local runner only
        self._parsed: _Parsed | None = None       # the last read's pre-parse, until take_parsed
        self._pool: Any = None
        self._admin: Any = None
        self._epochs: list | None = None          # sources/<i>/topic_ids.json, cached

    # -- description / schema -------------------------------------------------------------------
    @property
    def description(self) -> str:
        return f"KafkaV2[Subscribe[{','.join(self.topics)}]]"

    def schema(self) -> pa.Schema:
        return SCHEMA

    # -- parse_json on the value column (an overlap only; read() returns the same table) ---------
    def parse_values_as(self, json_schema: pa.Schema) -> None:
        """parse_json(json_schema) reads this source's value column: from now on read() also parses
        the values on a worker thread while it consumes the next ones (see take_parsed)."""
        import pyarrow.json as pajson
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

    # -- client ---------------------------------------------------------------------------------
    def _client(self):
        if self._consumer is None:
            from confluent_kafka import Consumer
            conf = {"bootstrap.servers": self.bootstrap_servers, "group.id": "increments-unused",
                    "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "error",
                    "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
                    "queued.max.messages.kbytes": 256 * 1024, "fetch.wait.max.ms": 5,
                    # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1 s) once its
                    # local queue holds queued.min.messages; a reader draining a range then sits idle
                    # for up to a second (measured: 5x slower reads, at random)
                    "fetch.queue.backoff.ms": 5}
            conf.update(self.client_config)
            self._consumer = Consumer(conf)
        return self._consumer

    def close(self) -> None:
        self._parsed = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _partitions(self) -> dict[str, list[int]]:
        c = self._client()
        out = {}
        for t in self.topics:   # one topic's metadata: the whole cluster's can take tens of ms on Tansu
            tm = c.list_topics(topic=t, timeout=10).topics.get(t)
            out[t] = sorted(tm.partitions) if tm is not None and tm.error is None else []
        return out

    def _watermarks(self, parts: dict[str, list[int]], low: bool = True) -> dict[tuple[str, int], tuple[int, int]]:
        """(low, high) per partition (low is 0 unless `low`). High is probed with a fetch from the
        logical end: Tansu answers ListOffsets(latest) with the last batch's base offset, so the
        end-of-partition event (offset = the fetch response's high watermark) gives the real high."""
        from confluent_kafka import OFFSET_END, TopicPartition
        c = self._client()
        tps = [(t, p) for t, ps in parts.items() for p in ps]
        if not tps:
            return {}
        lows = {tp: c.get_watermark_offsets(TopicPartition(*tp), timeout=10)[0] if low else 0 for tp in tps}
        result = {}
        c.assign([TopicPartition(t, p, OFFSET_END) for t, p in tps])
        deadline = time.time() + self.fetch_timeout_s
        try:
            while len(result) < len(tps) and time.time() < deadline:
                for m in c.consume(num_messages=100_000, timeout=0.01):
                    err = m.error()
                    if err is not None and err.code() == err._PARTITION_EOF:
                        tp = (m.topic(), m.partition())
                        if tp in lows:
                            result[tp] = (lows[tp], max(lows[tp], m.offset()))
        finally:
            c.unassign()
        pending = sorted(set(tps) - set(result))
        if pending:
            raise DataLossError(self.fail(f"could not reach the end of {pending} within "
                                          f"{self.fetch_timeout_s:.0f} s; is the broker at {self.bootstrap_servers} up?"))
        return result

    # -- offsets --------------------------------------------------------------------------------
    def initial_offset(self) -> dict:
        # sources/<i>/initial.json fixes the resolved starting offsets once: written create-only, and
        # a start that finds it (a restart, or a concurrent runner that wrote it first) adopts it
        own = self.own_files() if self.checkpoint is not None else None
        if own is not None:
            try:
                return json.loads(own.read_bytes("initial.json"))
            except FileNotFoundError:
                pass
        parts = self._partitions()
        wants = {}
        for t, ps in parts.items():
            for p in ps:
                want = self.starting_offsets
                if isinstance(want, dict):
                    want = want.get(t, {}).get(str(p), _EARLIEST)
                wants[(t, p)] = want
        need_end = any(w in ("latest", _LATEST) for w in wants.values())
        if need_end:
            wms = self._watermarks(parts)
        else:   # no end needed: the low watermarks alone (no fetch probe)
            from confluent_kafka import TopicPartition
            c = self._client()
            wms = {tp: (c.get_watermark_offsets(TopicPartition(*tp), timeout=10)[0], None) for tp in wants}
        out: dict[str, dict[str, int]] = {t: {} for t in self.topics}
        for (t, p), (lo, hi) in wms.items():
            want = wants[(t, p)]
            if want in ("earliest", _EARLIEST):
                out[t][str(p)] = lo
            elif want in ("latest", _LATEST):
                out[t][str(p)] = hi
            else:
                out[t][str(p)] = int(want)
        if own is not None:
            try:
                own.write_bytes("initial.json", json.dumps(out, sort_keys=True).encode(), create_only=True)
            except FileExistsError:
                return json.loads(own.read_bytes("initial.json"))
        return out

    def latest_offset(self, start: Any, limited: bool = True) -> dict:
        """Every partition's high watermark (new partitions from 0), cut by max_offsets_per_trigger
        and the AvailableNow target. A partition whose end went below `start` (topic recreated) is
        data loss: fail, or (fail_on_data_loss=False) move its offset back to the new end.

        Under AvailableNow the ends probed when the target was fixed are used, without asking the
        broker again (as Spark does): a range lost since then is found by read()."""
        reset = self._recreated(start)
        start = {t: ({} if t in reset else v) for t, v in start.items()}   # recreated: from its new beginning
        if self._target is not None:
            wms = {(t, int(p)): (0, hi) for t, ps in self._target.items() for p, hi in ps.items()}
        else:
            wms = self._watermarks(self._partitions(), low=False)
        end = {t: dict(v) for t, v in start.items()}
        for (t, p), (lo, hi) in wms.items():
            s = start.get(t, {}).get(str(p), 0)
            if hi < s:
                self._loss(t, p, hi, s, f"the partition now ends at {hi} (topic deleted and recreated?)")
            e = hi if self._target is None else min(hi, self._target.get(t, {}).get(str(p), 0))
            end.setdefault(t, {})[str(p)] = max(e, s) if hi >= s else hi
        if limited and self.max_offsets_per_trigger:
            end = self._rate_limit(start, end)
        return end

    def _rate_limit(self, start: dict, end: dict) -> dict:
        sizes = {(t, p): e - start.get(t, {}).get(p, 0) for t, ps in end.items() for p, e in ps.items()}
        total = sum(s for s in sizes.values() if s > 0)
        if total <= self.max_offsets_per_trigger:
            return end
        out = {t: dict(ps) for t, ps in end.items()}
        for (t, p), size in sizes.items():
            if size <= 0:
                continue
            share = self.max_offsets_per_trigger * size / total
            take = math.ceil(share) if share < 1 else math.floor(share)
            out[t][p] = start.get(t, {}).get(p, 0) + min(size, take)
        return out

    def has_new_data(self, start: Any, end: Any) -> bool:
        return any(e != start.get(t, {}).get(p, 0) for t, ps in end.items() for p, e in ps.items())

    def prepare_available_now(self) -> None:
        parts = self._partitions()
        self._target = {t: {} for t in parts}
        for (t, p), (lo, hi) in self._watermarks(parts, low=False).items():
            self._target[t][str(p)] = hi

    def available_now_target(self) -> Any:
        return self._target

    def set_available_now_target(self, target: Any) -> None:
        self._target = target

    def backlog(self, end: Any) -> dict[str, Any] | None:
        """Offsets available beyond `end` (the Kafka lag of the query), per topic-partition and in total.
        Side-effect free: it only asks the broker for each partition's end."""
        wms = self._watermarks(self._partitions())
        per = {f"{t}/{p}": max(0, hi - (end or {}).get(t, {}).get(str(p), lo)) for (t, p), (lo, hi) in wms.items()}
        return {"offsets_pending": sum(per.values()), "per_partition": per}

    # -- a topic deleted and recreated (sources/kafka_topics.py) ----------------------------------
    def _reset_after(self, start: Any) -> set[str]:
        from .kafka_topics import reset_after
        return reset_after(self, start)

    def _recreated(self, start: Any) -> set[str]:
        from .kafka_topics import recreated
        return recreated(self, start)

    def _loss(self, topic: str, partition: int, lo: int, hi: int, why: str) -> int:
        msg = (f"topic {topic!r}, partition {partition}: offsets [{lo}, {hi}) are no longer available ({why}). "
               "The data was deleted by retention or the topic was recreated before the query read it. "
               "Restart with fail_on_data_loss=False to skip the lost range (it is counted and logged), or "
               "start a new query with a new checkpoint.")
        if self.fail_on_data_loss:
            raise DataLossError(self.fail(msg))
        log.warning("%s", self.fail("skipping: " + msg))
        self.read_metrics["offsets_skipped"] = self.read_metrics.get("offsets_skipped", 0) + (hi - lo)
        return hi - lo

    # -- reading --------------------------------------------------------------------------------
    #: read(columns=...) skips the key and timestamp of every message when the query reads neither
    reads_columns = True

    def read(self, start: Any, end: Any, columns: list[str] | None = None) -> pa.Table:
        """Records with start <= offset < end per partition, partition by partition (see module doc).
        With `columns`, a key or timestamp column not in it is null (not read per message).

        No watermark probe on the common path: a range that begins below the low watermark (or past
        the end) makes the broker answer out-of-range, and only then are that partition's (low, high)
        probed and the lost part handled (`_loss`); a range that runs past the end meets the
        end-of-partition event before its end (data loss for the rest, see `_read_partition`)."""
        self.read_metrics = {"offsets_skipped": 0}
        reset = self._reset_after(start)
        if reset:
            self.read_metrics["recreated_topics"] = sorted(reset)
            start = {t: ({} if t in reset else v) for t, v in start.items()}
        skip = frozenset() if columns is None else frozenset({"key", "timestamp"} - set(columns))
        self._parsed = None
        parse = self._parse_options is not None and self._parse_while_reading
        ranges = []
        for t, ps in end.items():
            for p, e in ps.items():
                s = start.get(t, {}).get(p, 0)
                if e < s:
                    self._loss(t, int(p), e, s, f"the partition now ends at {e} (topic deleted and recreated?)")
                elif e > s:
                    ranges.append((t, int(p), s, e))
        # one partition at a time: measured faster on Tansu than overlapping fetches of all of them
        read = [self._read_partition(t, p, s, e, parse, skip) for t, p, s, e in sorted(ranges)]
        tables = [x for x, _ in read if x.num_rows]
        out = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
        if parse and out.num_rows and all(pieces is not None for _, pieces in read):
            self._parsed = _Parsed(out, self._parse_schema, [x for _, pieces in read for x in pieces])
        return out

    def _clamp(self, t: str, p: int, s: int, e: int) -> tuple[int, int]:
        """Probe (low, high) and apply the data-loss rule to [s, e): the part the broker still holds."""
        lo, hi = self._watermarks({t: [p]})[(t, p)]
        if s < lo:
            self._loss(t, p, s, min(lo, e), f"the earliest offset the broker holds is {lo}")
            s = min(lo, e)
        if hi < e:
            self._loss(t, p, max(s, hi), e, f"the partition ends at {hi}")
            e = max(s, hi)
        return s, e

    def _read_partition(self, t: str, p: int, s: int, e: int, parse: bool = False,
                        skip: frozenset = frozenset()) -> tuple[pa.Table, list | None]:
        """[s, e) of one partition, ordered by offset, and its pre-parse pieces (see _consume_range).
        Out of range at the start -> probe, apply the data-loss rule, read what is left (once),
        without the stall probe."""
        try:
            return self._consume_range(t, p, s, e, parse=parse, skip=skip)
        except _OutOfRange:
            s, e = self._clamp(t, p, s, e)
            if s >= e:
                return SCHEMA.empty_table(), []
            try:
                return self._consume_range(t, p, s, e, probe_stall=False, parse=parse, skip=skip)
            except _OutOfRange as x:
                raise DataLossError(self.fail(f"topic {t!r}, partition {p}: offsets [{s}, {e}) are out of range "
                                              f"on the broker ({x}) although it reported them available; retry "
                                              "the query (the topic may be changing under it)")) from None

    def _consume_range(self, t: str, p: int, s: int, e: int, probe_stall: bool = True,
                       parse: bool = False, skip: frozenset = frozenset()) -> tuple[pa.Table, list | None]:
        """Consume [s, e) of (t, p) in small chunks (_consume_step), each dropped before the next
        consume(); topic and partition are constants here, not read per message. Nothing at all
        within _STALL_S of the start (a start past the end gets no answer from Tansu) raises
        _OutOfRange when probe_stall. Columns in `skip` ("key", "timestamp") are not read per
        message (null in the table).

        Per message only error() and value() are called (and len() of the value): librdkafka hands
        a partition's messages over in strictly increasing offsets, so a chunk whose last offset is
        its first + len - 1 holds exactly those offsets (taken as a range, not message by message);
        any other chunk has its offsets read one by one (and _build sorts and cuts). The values are
        kept as Arrow binary pieces of about _PARSE_BYTES (one b"".join per piece, no per-value
        conversion). With `parse`, each piece also goes to the worker thread (_parse_piece, which
        holds no GIL) while the next messages are consumed; returns [(messages, future)] in row
        order, or None when a value is null or the rows had to be reordered or cut (nothing to
        pre-parse or line up)."""
        from confluent_kafka import Message, TopicPartition
        m_error, m_offset, m_value = Message.error, Message.offset, Message.value
        c = self._client()
        step = _consume_step()
        pieces: list | None = [] if parse else None
        keys: list | None = None if "key" in skip else []
        chunks: list = []            # the value column: Arrow binary arrays, one per piece
        piece: list = []             # values of the piece being filled
        lens: list | None = []       # their lengths (np arrays per consumed chunk); None: a null value
        pending = 0                  # bytes in piece
        offsets: list = []           # np int64 arrays, one per consumed chunk
        stamps: list | None = None if "timestamp" in skip else []
        last = s - 1

        def close_piece() -> None:
            nonlocal piece, lens, pending, pieces
            arr = _binary_array(piece, lens)
            chunks.append(arr)
            if pieces is not None:
                if lens is None:   # a null value (tombstone): parse_json's exact path decides
                    pieces = None
                else:
                    pieces.append(self._hand_to_parse(arr))
            piece, lens, pending = [], [], 0

        c.assign([TopicPartition(t, p, s)])
        deadline = time.time() + self.fetch_timeout_s
        stall_at = time.time() + _STALL_S
        try:
            while last < e - 1:
                msgs = c.consume(num_messages=max(1, min(step, e - 1 - last)), timeout=0.1)
                if not msgs:
                    if probe_stall and last < s and time.time() > stall_at:
                        raise _OutOfRange(f"nothing at offset {s} after {_STALL_S:.0f} s")   # past the end?
                    if time.time() > deadline:
                        raise DataLossError(self.fail(f"offsets topic {t!r} partition {p} [{last + 1}, {e}) did not "
                                                      f"arrive within {self.fetch_timeout_s:.0f} s"))
                    continue
                deadline = time.time() + self.fetch_timeout_s
                ended = False
                if any(map(m_error, msgs)):
                    ended = self._check_errors(msgs, t, p, e, last)
                    msgs = [m for m in msgs if m.error() is None]
                if msgs:
                    n = len(msgs)
                    first, end_off = msgs[0].offset(), msgs[-1].offset()
                    if end_off - first == n - 1 and first > last:   # strictly increasing: exactly first..end_off
                        offsets.append(np.arange(first, end_off + 1, dtype=np.int64))
                    else:
                        offsets.append(np.fromiter(map(m_offset, msgs), np.int64, n))
                    vals = list(map(m_value, msgs))
                    if keys is not None:
                        keys += map(Message.key, msgs)
                    piece += vals
                    if stamps is not None:   # timestamp() costs ~4x value(): only when read
                        stamps += map(_second, map(Message.timestamp, msgs))
                    last = max(last, end_off)
                    if lens is not None:
                        try:
                            ln = np.fromiter(map(len, vals), np.int64, n)
                        except TypeError:   # a null value
                            lens = None
                        else:
                            lens.append(ln)
                            pending += int(ln.sum())
                    if pending >= _PARSE_BYTES:
                        close_piece()
                del msgs   # before the next consume(): see _consume_step
                if ended:
                    break
        finally:
            c.unassign()
        if piece:
            close_piece()
        table, in_order = self._build(t, p, s, e, keys, chunks, offsets, stamps)
        return table, (pieces if in_order else None)

    def _hand_to_parse(self, piece: pa.Array) -> tuple[int, Any]:
        return len(piece), self._parse_pool().submit(_parse_piece, piece, self._parse_options)

    def _parse_pool(self):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="increments-kafka-parse")
        return self._pool

    @staticmethod
    def _build(t: str, p: int, s: int, e: int, keys: list | None, chunks: list, offsets: list,
               stamps: list | None) -> tuple[pa.Table, bool]:
        """The partition's table, and whether the messages came in order and inside [s, e) (else
        they were sorted and cut here). keys/stamps None: not read (the column is null)."""
        off = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)
        n = len(off)
        key = pa.array(keys, pa.binary()) if keys is not None else None
        value = pa.chunked_array(chunks, pa.binary())
        ts = np.asarray(stamps, np.int64) if stamps is not None else None
        in_order = True
        if n and (off[0] < s or off[-1] >= e or (n > 1 and not bool(np.all(off[1:] > off[:-1])))):
            in_order = False
            order = np.argsort(off, kind="stable")
            order = order[(off[order] >= s) & (off[order] < e)]
            take = pa.array(order)
            key = key.take(take) if key is not None else None
            value = value.take(take)
            off = off[order]
            ts = ts[order] if ts is not None else None
            n = len(off)
        stamp = (pa.array(ts * 1000).cast(pa.timestamp("us", tz="UTC")) if ts is not None
                 else pa.nulls(n, pa.timestamp("us", tz="UTC")))
        return pa.table([key if key is not None else pa.nulls(n, pa.binary()), value,
                         pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)),
                                                        pa.array([t], pa.string())).cast(pa.string()),
                         pa.array(np.full(n, p, np.int32)), pa.array(off), stamp], schema=SCHEMA), in_order

    def _check_errors(self, msgs: list, t: str, p: int, e: int, last: int) -> bool:
        """Raise on real errors; True when the partition ended before `e` (a data loss that
        fail_on_data_loss=False skips: stop waiting); out of range raises _OutOfRange (see read)."""
        ended = False
        for m in msgs:
            err = m.error()
            if err is None:
                continue
            if err.code() == err._PARTITION_EOF:
                if (m.topic(), m.partition()) == (t, p) and m.offset() < e:
                    self._loss(t, p, max(m.offset(), last + 1), e, f"the partition ends at {m.offset()}")
                    ended = True
                continue
            if err.code() in (err._AUTO_OFFSET_RESET, err.OFFSET_OUT_OF_RANGE):
                raise _OutOfRange(str(err))
            raise DataLossError(self.fail(f"topic {t!r}, partition {p}: reading from offset {last + 1} failed: {err}"))
        return ended


def _starting_offsets(value: Any, topics: list[str]) -> Any:
    """starting_offsets checked: "earliest", "latest", or {"topic": {"partition": offset}} (a dict or
    its JSON text) with offsets >= 0, -2 (earliest) or -1 (latest), for subscribed topics only.
    ValueError naming the option and what is wrong."""
    usage = ('use "earliest", "latest" or JSON such as {"clicks": {"0": 42, "1": -2}} (per topic and partition: '
             'an offset, -2 for earliest, -1 for latest)')
    where = f"read_stream.kafka(starting_offsets={value!r})"
    if isinstance(value, str) and value.strip().lower() in ("earliest", "latest"):
        return value.strip().lower()
    if isinstance(value, str):
        if not value.strip().startswith("{"):
            raise ValueError(f"{where}: not 'earliest', 'latest' or JSON; {usage}")
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ValueError(f"{where}: not valid JSON ({e}); {usage}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {usage}")
    out: dict[str, dict[str, int]] = {}
    for t, parts in value.items():
        if t not in topics:
            raise ValueError(f"{where}: topic {t!r} is not subscribed (topics: {topics}); give offsets only for "
                             "the topics the source reads")
        if not isinstance(parts, dict):
            raise ValueError(f"{where}: the value for topic {t!r} must map partitions to offsets; {usage}")
        out[t] = {}
        for p, off in parts.items():
            if not str(p).isdigit() or isinstance(off, bool) or not isinstance(off, int) or off < -2:
                raise ValueError(f"{where}: topic {t!r}, partition {p!r}: offset {off!r} is not valid; {usage}")
            out[t][str(p)] = off
    return out


class _OutOfRange(Exception):
    """The broker no longer (or not yet) holds the offset a read started at."""

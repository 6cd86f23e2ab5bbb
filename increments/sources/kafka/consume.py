"""read(start, end) of a Kafka source: each partition's range consumed into an Arrow table.

See the package docstring for the contracts (exact ranges, the data-loss rule applied while
consuming, no probe on the common path) and _consume_range for how messages become columns.
"""
from __future__ import annotations

import gc
import operator
import time
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, Message, TopicPartition

from ...errors import DataLossError
from .parse import _Parsed
from .topics import request_topic_ids

SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                    ("partition", pa.int32()), ("offset", pa.int64()),
                    ("timestamp", pa.timestamp("us", tz="UTC"))])
_second = operator.itemgetter(1)
_CHUNK = 500       # messages per consume() call at most (see _consume_step)
_PARSE_BYTES = 2 << 20   # values kept (and handed to the parse thread) in pieces of about this size
_STALL_S = 1.0     # no answer at all this long after assign -> probe the partition's (low, high)
#: under AvailableNow in the local runner, the rest of a partition up to the target is read with the
#: range before it (and kept for the next reads, _Stash) when the stashes hold at most this many offsets
#: and about this many value bytes in all (librdkafka would queue that much ahead anyway)
_STASH_OFFSETS = 20_000
_STASH_BYTES = 16 << 20


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


def _repeated(text: str, n: int) -> pa.Array:
    """A string array of `text` n times, built from its buffers (a dictionary array cast to string
    costs ~20x more for a batch of 50 rows); past int32 offsets, by the dictionary cast."""
    b = text.encode()
    if (n + 1) * len(b) >= 1 << 31:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)),
                                              pa.array([text], pa.string())).cast(pa.string())
    offsets = np.arange(0, (n + 1) * len(b), len(b), dtype=np.int32) if b else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b * n)])


def _consume_step() -> int:
    """Messages per consume(): fewer than the cyclic GC's first threshold (700 allocations by default).
    Message objects are tracked by the GC; with tens of thousands alive at once (one large consume()
    chunk) every collection traverses them again and promotes them, and the full collections that
    follow traverse the whole heap: measured a third of the read time at 20k messages per call, and
    no collection at all when each small chunk is dropped before the next call."""
    first = gc.get_threshold()[0]
    return _CHUNK if first <= 0 else min(_CHUNK, max(50, first - 200))


class _Reader(Consumer):
    """read()'s consumer: a Consumer that remembers its own assignment (`held`: (topic, partition,
    offset) of a one-partition assign, else None). Consumer.assignment() is a synchronous request to
    librdkafka's main thread (~0.2 ms of wall each, four a batch); no consumer group is used, so the
    assignment changes only through these calls. None when unknown (assign() raised): the next
    _assign then assigns again, which replaces whatever librdkafka holds."""

    def __init__(self, conf: dict):
        super().__init__(conf)
        self.held: tuple | None = None

    def assign(self, partitions: list) -> None:
        self.held = None
        super().assign(partitions)
        if len(partitions) == 1:
            tp = partitions[0]
            self.held = (tp.topic, tp.partition, tp.offset)

    def unassign(self) -> None:
        self.held = None
        super().unassign()


def _held(c: Any) -> tuple | None:
    """(topic, partition, assigned offset) when c holds exactly one partition, else None."""
    if isinstance(c, _Reader):
        return c.held
    a = c.assignment()
    return (a[0].topic, a[0].partition, a[0].offset) if len(a) == 1 else None


def _holds(c: Any, t: str, p: int, s: int) -> bool:
    """Whether consumer c's next message is (t, p)'s offset s, with nothing else assigned: assigned
    there ahead and not consumed from since (the assignment's offset, no position yet), or kept
    assigned by a read that consumed exactly up to s - 1 (its position is s: librdkafka hands over
    a partition's messages in order, so the next one it returns is the first at or after s)."""
    h = _held(c)
    if h is None or (h[0], h[1]) != (t, p):
        return False
    pos = c.position([TopicPartition(t, p)])[0].offset
    return pos == s if pos >= 0 else h[2] == s


def _assign(c: Any, t: str, p: int, s: int) -> None:
    """Assign consumer c to (t, p) from offset s, unless it already holds exactly that (_holds)."""
    if not _holds(c, t, p, s):
        c.assign([TopicPartition(t, p, s)])


class _OutOfRange(Exception):
    """The broker no longer (or not yet) holds the offset a read started at."""


class _NoStash(Exception):
    """Reading a partition's rest ahead (_stash_rest) met anything but plain messages: not kept."""


def _all_below(msgs: list, t: str, p: int, e: int) -> bool:
    """Among messages read ahead (_stash_rest): True on (t, p)'s end-of-partition event at or past
    e (every message below e has been handed over); any other error raises _NoStash."""
    for m in msgs:
        err = m.error()
        if err is None:
            continue
        if err.code() == err._PARTITION_EOF and (m.topic(), m.partition()) == (t, p) and m.offset() >= e:
            return True
        raise _NoStash()
    return False


class _Stash:
    """The rest of one partition up to the AvailableNow target, read with an earlier range (see
    KafkaConsume._stash_rest): `table` holds exactly the messages with start <= offset < end (SCHEMA,
    ordered by offset; `off` its offsets), columns in `skip` null. A read of [start, e) with e <= end
    takes its first rows and the stash then starts at e; any other read of the partition drops it."""
    __slots__ = ("end", "off", "skip", "start", "table")

    def __init__(self, start: int, end: int, table: pa.Table, skip: frozenset):
        self.start, self.end, self.table, self.skip = start, end, table, skip
        self.off = table.column("offset").to_numpy()


class KafkaConsume:
    """KafkaSource's reading half: read() and what it needs (the client, the data-loss rule and
    the parse hand-off come from the other halves)."""

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
            if self._stash:
                self._stash = {tp: x for tp, x in self._stash.items() if tp[0] not in reset}
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
        read = self._read_ranges(sorted(ranges), parse, skip, end)
        if self._parse_while_reading and self._target is not None and self.checkpoint is not None:
            request_topic_ids(self)   # the next plan's topic-id check, answered while this batch runs
        tables = [x for x, _ in read if x.num_rows]
        out = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
        if parse and out.num_rows and all(pieces is not None for _, pieces in read):
            self._parsed = _Parsed(out, self._parse_schema, [x for _, pieces in read for x in pieces])
        return out

    def _read_ranges(self, ranges: list, parse: bool, skip: frozenset, end: Any = None) -> list:
        """Each (t, p, s, e) range in turn, one partition at a time (measured faster on Tansu than
        one consumer fetching all of them at once). A range a stash holds (_Stash: the rest of the
        partition, read ahead by an earlier range, see _stash_rest) is taken from it without a
        consumer. The others are read on two consumers in turn: while one consumes a range, the
        other is already assigned to the next, so librdkafka's threads fetch it in the background
        (the first messages after an assign take 20-100 ms here, more than consuming 20k messages).
        Afterwards both are unassigned, except, with `end` under AvailableNow in the local runner
        (where the next read starts: _next_start), the one that consumed that partition exactly up
        to there: it stays assigned, with what librdkafka fetched beyond the range already queued,
        and becomes the first consumer (the next read consumes from it without an assign); if none
        did, the first consumer is assigned there ahead."""
        out: list = [None] * len(ranges)
        todo = []
        for i, r in enumerate(ranges):
            got = self._from_stash(*r, parse, skip)
            if got is None:
                todo.append((i, r))
            else:
                out[i] = got
        ahead = self._next_start(end) if end is not None else None
        readers = self._readers() if todo or ahead is not None else (self._reader_pair or [])
        kept = None
        try:
            if todo:
                _assign(readers[0], *todo[0][1][:3])   # unless the previous read left it there
            for j, (i, (t, p, s, e)) in enumerate(todo):
                if j + 1 < len(todo):
                    _assign(readers[(j + 1) % 2], *todo[j + 1][1][:3])
                c = readers[j % 2]
                out[i] = self._read_partition(t, p, s, e, parse, skip, reader=c)
                if self._stash_rest(c, t, p, s, e, out[i][0], skip):
                    if ahead is not None and ahead[:2] == (t, p):
                        ahead = self._next_start(end)   # that partition's next reads need no consumer
                    c.unassign()
                elif kept is None and ahead is not None and _holds(c, *ahead):
                    kept = c              # consumed exactly up to where the next read starts
                else:
                    c.unassign()
        except BaseException:
            for c in readers:
                c.unassign()
            raise
        for c in readers:
            if c is not kept and _held(c) is not None:
                c.unassign()
        if kept is not None and kept is not readers[0]:
            readers.reverse()                      # the pair itself: the next read starts on `kept`
        elif kept is None and ahead is not None:
            _assign(readers[0], *ahead)
        return out

    def _next_start(self, end: Any) -> tuple | None:
        """Under AvailableNow in the local runner (read-ahead enabled), where the next read() starts
        on a consumer: the first partition (in read order) that ends before the AvailableNow target
        and whose rest is not stashed (_Stash), at this read's end. librdkafka fetches it while this
        batch is processed and committed and the next one planned (_read_ranges); the next read()
        consumes it if its first range starts there, and otherwise re-assigns (_assign). None for an
        open-ended stream (an idle query would keep fetching) and outside the local runner. Which
        offsets a read returns never depends on it."""
        if not self._parse_while_reading or self._target is None:
            return None
        for t, p in sorted((t, int(p)) for t, ps in end.items() for p in ps):
            e = end[t][str(p)]
            if e < self._target.get(t, {}).get(str(p), 0) and not self._stashed(t, p, e):
                return t, p, e
        return None

    def _stashed(self, t: str, p: int, s: int) -> bool:
        """Whether a stash holds (t, p) from offset s on (the next read of it needs no consumer)."""
        x = self._stash.get((t, p)) if self._stash else None
        return x is not None and x.start == s

    def _from_stash(self, t: str, p: int, s: int, e: int, parse: bool, skip: frozenset) -> tuple | None:
        """[s, e) of (t, p) from its stash, as _read_partition returns it (the table and its pieces
        handed to the parse threads, one per chunk of the stash's value column: chunks of about
        _PARSE_BYTES, as read), when the stash starts at s, reaches e and was read with the same
        columns; the stash then starts at e (dropped once empty). Any other read of the partition
        drops its stash (a replay, a read of other columns) and returns None: read from the broker."""
        x = self._stash.get((t, p)) if self._stash else None
        if x is None:
            return None
        if x.start != s or e > x.end or x.skip != skip:
            del self._stash[(t, p)]
            return None
        i = int(np.searchsorted(x.off, e))
        part = x.table.slice(0, i)
        if e >= x.end:
            del self._stash[(t, p)]
        else:
            x.table, x.off, x.start = x.table.slice(i), x.off[i:], e
        pieces = None
        if parse:
            value = part.column("value")
            if value.null_count == 0:    # a null value (tombstone): parse_json's exact path decides
                pieces = [self._hand_to_parse(ch) for ch in value.chunks if len(ch)]
        return part, pieces

    def _stash_rest(self, c: Any, t: str, p: int, s: int, e: int, table: pa.Table, skip: frozenset) -> bool:
        """Under AvailableNow in the local runner, once c has read [s, e) of (t, p) (`table`): when
        the rest of the partition up to the target, [e, target), is small (all stashes together at
        most _STASH_OFFSETS offsets and, estimated from this range, about _STASH_BYTES of values),
        consume it now on c and keep it (_Stash) for the next reads, which then need no consumer.
        Why: a consumer kept assigned at a partition's end polls the broker (every fetch.wait.max.ms)
        for as long as it stays assigned, ~15 fetches a small batch that the broker answers on the
        same cores (bench/README.md, issue 33, fifth pass); librdkafka has no "stop at offset", and
        pause() drops what it fetched. The messages are the log's, read once either way; this read's
        table and offsets are unchanged. Anything but plain messages up to the target (an error, an
        end-of-partition event before it, nothing for _STALL_S, more than twice the bytes estimated)
        keeps nothing (and is not tried again for that partition in this query: self._stash maps it
        to None): the next reads consume those ranges themselves and apply the data-loss rule there,
        in their own batch. True when a stash was made (c is then past the target)."""
        if not self._parse_while_reading or self._target is None:
            return False
        n = self._target.get(t, {}).get(str(p), 0) - e
        if n <= 0:
            return False
        stash = self._stash if self._stash is not None else {}
        if (t, p) in stash and stash[(t, p)] is None:
            return False                      # tried in this query and met something unusual
        stash.pop((t, p), None)
        kept = [x for x in stash.values() if x is not None]
        if sum(len(x.off) for x in kept) + n > _STASH_OFFSETS:
            return False
        room = _STASH_BYTES - sum(x.table.column("value").nbytes for x in kept)
        if table.column("value").nbytes / max(1, e - s) * n > room or not _holds(c, t, p, e):
            return False
        self._stash = stash
        try:
            rest, _ = self._consume_range(t, p, e, e + n, probe_stall=False, skip=skip, reader=c,
                                          ahead_bytes=2 * room)
        except _NoStash:
            stash[(t, p)] = None              # not again for this partition: its batches read it
            return False
        stash[(t, p)] = _Stash(e, e + n, rest, skip)
        return True

    def _read_partition(self, t: str, p: int, s: int, e: int, parse: bool = False,
                        skip: frozenset = frozenset(), reader: Any = None) -> tuple[pa.Table, list | None]:
        """[s, e) of one partition, ordered by offset, and its pre-parse pieces (see _consume_range).
        Out of range at the start -> probe, apply the data-loss rule, read what is left (once),
        without the stall probe."""
        try:
            return self._consume_range(t, p, s, e, parse=parse, skip=skip, reader=reader)
        except _OutOfRange:
            s, e = self._clamp(t, p, s, e)
            if s >= e:
                return SCHEMA.empty_table(), []
            try:
                return self._consume_range(t, p, s, e, probe_stall=False, parse=parse, skip=skip, reader=reader)
            except _OutOfRange as x:
                raise DataLossError(self.fail(f"topic {t!r}, partition {p}: offsets [{s}, {e}) are out of range "
                                              f"on the broker ({x}) although it reported them available; retry "
                                              "the query (the topic may be changing under it)")) from None

    def _consume_range(self, t: str, p: int, s: int, e: int, probe_stall: bool = True,
                       parse: bool = False, skip: frozenset = frozenset(),
                       reader: Any = None, ahead_bytes: int | None = None) -> tuple[pa.Table, list | None]:
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
        pre-parse or line up).

        With `ahead_bytes` (_stash_rest: the rest of a partition read ahead), anything but plain
        messages up to e raises _NoStash instead (an error, an end-of-partition event before e, no
        message for _STALL_S, a null value, more than ahead_bytes of values); an end-of-partition
        event at or past e means every message below e has been handed over."""
        m_error, m_offset, m_value = Message.error, Message.offset, Message.value
        c = reader if reader is not None else self._readers()[0]
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
        taken = 0                    # value bytes so far (ahead_bytes)

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

        _assign(c, t, p, s)   # unless it holds s already (_read_ranges)
        deadline = time.time() + self.fetch_timeout_s
        stall_at = time.time() + _STALL_S
        try:
            while last < e - 1:
                msgs = c.consume(num_messages=max(1, min(step, e - 1 - last)), timeout=0.1)
                if not msgs:
                    if ahead_bytes is not None and time.time() > stall_at:
                        raise _NoStash()
                    if probe_stall and last < s and time.time() > stall_at:
                        raise _OutOfRange(f"nothing at offset {s} after {_STALL_S:.0f} s")   # past the end?
                    if time.time() > deadline:
                        raise DataLossError(self.fail(f"offsets topic {t!r} partition {p} [{last + 1}, {e}) did not "
                                                      f"arrive within {self.fetch_timeout_s:.0f} s"))
                    continue
                deadline = time.time() + self.fetch_timeout_s
                ended = False
                if any(map(m_error, msgs)):
                    ended = (self._check_errors(msgs, t, p, e, last) if ahead_bytes is None
                             else _all_below(msgs, t, p, e))
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
                            got = int(ln.sum())
                            pending += got
                            taken += got
                    if ahead_bytes is not None:
                        if lens is None or taken > ahead_bytes:   # a null value, or more than estimated
                            raise _NoStash()
                        stall_at = time.time() + _STALL_S
                    if pending >= _PARSE_BYTES:
                        close_piece()
                del msgs   # before the next consume(): see _consume_step
                if ended:
                    break
        except BaseException:
            c.unassign()
            raise
        if piece:
            close_piece()
        table, in_order = self._build(t, p, s, e, keys, chunks, offsets, stamps)
        return table, (pieces if in_order else None)

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
        return pa.table([key if key is not None else pa.nulls(n, pa.binary()), value, _repeated(t, n),
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

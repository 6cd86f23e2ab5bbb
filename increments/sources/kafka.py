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
"""
from __future__ import annotations

import json
import logging
import math
import operator
import os
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
_K = 1 << 32   # (topic index, partition) -> one int64 code


class _LazyMessage:
    """confluent_kafka.Message's unbound methods, for map() over a consumed chunk (no Python loop)."""
    def __getattr__(self, name):
        from confluent_kafka import Message
        return getattr(Message, name)


_M = _LazyMessage()


class KafkaSource(Source):
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
        if isinstance(starting_offsets, str) and starting_offsets.strip().startswith("{"):
            starting_offsets = json.loads(starting_offsets)
        if isinstance(starting_offsets, str) and starting_offsets not in ("earliest", "latest"):
            raise ValueError(f"starting_offsets={starting_offsets!r}: use 'earliest', 'latest' or "
                             '{"topic": {"0": 42}} (-2 earliest, -1 latest)')
        self.starting_offsets = starting_offsets
        if max_offsets_per_trigger is not None and int(max_offsets_per_trigger) < 1:
            raise ValueError("max_offsets_per_trigger must be >= 1")
        self.max_offsets_per_trigger = int(max_offsets_per_trigger) if max_offsets_per_trigger else None
        self.fail_on_data_loss = str(fail_on_data_loss).lower() not in ("false", "0", "no")
        self.fetch_timeout_s = float(client_config.pop("fetch_timeout_ms", 60_000)) / 1000
        self.client_config = {k.replace("_", "."): v for k, v in client_config.items()}
        self.read_metrics: dict[str, Any] = {}
        self._consumer = None
        self._target: dict | None = None

    # -- description / schema -------------------------------------------------------------------
    @property
    def description(self) -> str:
        return f"KafkaV2[Subscribe[{','.join(self.topics)}]]"

    def schema(self) -> pa.Schema:
        return SCHEMA

    # -- client ---------------------------------------------------------------------------------
    def _client(self):
        if self._consumer is None:
            from confluent_kafka import Consumer
            conf = {"bootstrap.servers": self.bootstrap_servers, "group.id": "increments-unused",
                    "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "error",
                    "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
                    "queued.max.messages.kbytes": 256 * 1024, "fetch.wait.max.ms": 50}
            conf.update(self.client_config)
            self._consumer = Consumer(conf)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _partitions(self) -> dict[str, list[int]]:
        md = self._client().list_topics(timeout=10)
        out = {}
        for t in self.topics:
            tm = md.topics.get(t)
            out[t] = sorted(tm.partitions) if tm is not None and tm.error is None else []
        return out

    def _watermarks(self, parts: dict[str, list[int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(low, high) per partition. High is probed with a fetch: Tansu answers ListOffsets(latest)
        with the last batch's base offset, so the end-of-partition event gives the real high."""
        from confluent_kafka import TopicPartition
        c = self._client()
        listed = {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=10) for t, ps in parts.items() for p in ps}
        if not listed:
            return {}
        result = dict(listed)
        pending = {tp for tp, (lo, hi) in listed.items()}
        c.assign([TopicPartition(t, p, max(hi - 1, lo)) for (t, p), (lo, hi) in listed.items()])
        deadline = time.time() + self.fetch_timeout_s
        while pending and time.time() < deadline:
            for m in c.consume(num_messages=100_000, timeout=0.02):
                err = m.error()
                if err is not None and err.code() == err._PARTITION_EOF and (m.topic(), m.partition()) in pending:
                    tp = (m.topic(), m.partition())
                    result[tp] = (listed[tp][0], max(listed[tp][1], m.offset()))
                    pending.discard(tp)
        c.unassign()
        if pending:
            raise DataLossError(self.fail(f"could not reach the end of {sorted(pending)} within "
                                          f"{self.fetch_timeout_s:.0f} s; is the broker at {self.bootstrap_servers} up?"))
        return result

    # -- offsets --------------------------------------------------------------------------------
    def initial_offset(self) -> dict:
        path = os.path.join(self.checkpoint_dir, "sources", str(self.index), "initial.json") if self.checkpoint_dir else None
        if path and os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        wms = self._watermarks(self._partitions())
        out: dict[str, dict[str, int]] = {t: {} for t in self.topics}
        for (t, p), (lo, hi) in wms.items():
            want = self.starting_offsets
            if isinstance(want, dict):
                want = want.get(t, {}).get(str(p), _EARLIEST)
            if want in ("earliest", _EARLIEST):
                out[t][str(p)] = lo
            elif want in ("latest", _LATEST):
                out[t][str(p)] = hi
            else:
                out[t][str(p)] = int(want)
        if path:
            from ..checkpoint.metadata import atomic_write_json
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write_json(path, out)
        return out

    def latest_offset(self, start: Any, limited: bool = True) -> dict:
        """Every partition's high watermark (new partitions from 0), cut by max_offsets_per_trigger
        and the AvailableNow target. A partition whose end went below `start` (topic recreated) is
        data loss: fail, or (fail_on_data_loss=False) move its offset back to the new end."""
        wms = self._watermarks(self._partitions())
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

    def num_rows_hint(self, start: Any, end: Any) -> int | None:
        return sum(max(0, e - start.get(t, {}).get(p, 0)) for t, ps in end.items() for p, e in ps.items())

    def prepare_available_now(self) -> None:
        parts = self._partitions()
        self._target = {t: {} for t in parts}
        for (t, p), (lo, hi) in self._watermarks(parts).items():
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
    def read(self, start: Any, end: Any) -> pa.Table:
        """Records with start <= offset < end per partition, partition by partition (see module doc)."""
        from confluent_kafka import TopicPartition
        self.read_metrics = {"offsets_skipped": 0}
        ranges = [(t, int(p), start.get(t, {}).get(p, 0), e) for t, ps in end.items() for p, e in ps.items()
                  if e > start.get(t, {}).get(p, 0)]
        for t, ps in end.items():
            for p, e in ps.items():
                s = start.get(t, {}).get(p, 0)
                if e < s:
                    self._loss(t, int(p), e, s, f"the partition now ends at {e} (topic deleted and recreated?)")
        if not ranges:
            return SCHEMA.empty_table()
        wms = self._watermarks({t: sorted({p for tt, p, _, _ in ranges if tt == t}) for t in {r[0] for r in ranges}})
        todo: dict[tuple[str, int], tuple[int, int]] = {}
        for t, p, s, e in ranges:
            lo, hi = wms[(t, p)]
            if s < lo:
                self._loss(t, p, s, min(lo, e), f"the earliest offset the broker holds is {lo}")
                s = min(lo, e)
            if hi < e:
                self._loss(t, p, max(s, hi), e, f"the partition ends at {hi}")
                e = max(s, hi)
            if s < e:
                todo[(t, p)] = (s, e)
        # one partition at a time: measured faster on Tansu than overlapping fetches of all of them
        tables = [self._read_ranges({k: todo[k]}) for k in sorted(todo)]
        tables = [x for x in tables if x.num_rows]
        return pa.concat_tables(tables) if tables else SCHEMA.empty_table()

    def _read_ranges(self, todo: dict[tuple[str, int], tuple[int, int]]) -> pa.Table:
        """Every partition's [start, end) at once (fetches overlap): consume in large chunks, build
        columns with map() over the chunk, drop what lies past each end, order by (topic, partition,
        offset) so a replay returns the rows in the same order."""
        from confluent_kafka import TopicPartition
        c = self._client()
        topic_ix = {t: i for i, t in enumerate(sorted({t for t, _ in todo}))}
        code_end = {topic_ix[t] * _K + p: e for (t, p), (s, e) in todo.items()}
        last = {k: s - 1 for k, (s, e) in todo.items()}
        pending = set(todo)
        cols: dict[str, list] = {"key": [], "value": [], "tix": [], "partition": [], "offset": [], "ts": []}
        c.assign([TopicPartition(t, p, s) for (t, p), (s, e) in todo.items()])
        deadline = time.time() + self.fetch_timeout_s
        try:
            while pending:
                want = sum(todo[k][1] - 1 - last[k] for k in pending)
                msgs = c.consume(num_messages=max(1, min(100_000, want)), timeout=0.5)
                if not msgs:
                    if time.time() > deadline:
                        raise DataLossError(self.fail("offsets " + ", ".join(
                            f"topic {t!r} partition {p} [{last[(t, p)] + 1}, {todo[(t, p)][1]})" for t, p in sorted(pending))
                            + f" did not arrive within {self.fetch_timeout_s:.0f} s"))
                    continue
                deadline = time.time() + self.fetch_timeout_s
                errors = list(map(_M.error, msgs))
                if any(errors):
                    for t, p in self._check_errors(msgs, todo, last):
                        pending.discard((t, p))
                    msgs = [m for m, e in zip(msgs, errors) if e is None]
                    if not msgs:
                        continue
                tix = list(map(topic_ix.__getitem__, map(_M.topic, msgs)))
                parts = list(map(_M.partition, msgs))
                offs = list(map(_M.offset, msgs))
                cols["key"] += map(_M.key, msgs)
                cols["value"] += map(_M.value, msgs)
                cols["ts"] += map(_second, map(_M.timestamp, msgs))
                cols["tix"] += tix
                cols["partition"] += parts
                cols["offset"] += offs
                for t, p in list(pending):   # the last offset seen per partition (offsets ascend within one)
                    k = (t, p)
                    seen = _last_offset(tix, parts, offs, topic_ix[t], p)
                    if seen is not None:
                        last[k] = max(last[k], seen)
                        if last[k] >= todo[k][1] - 1:
                            pending.discard(k)
                            c.pause([TopicPartition(t, p)])
        finally:
            c.resume([TopicPartition(t, p) for t, p in todo])   # the pause would outlive the assignment
            c.unassign()
        return self._build(cols, topic_ix, code_end)

    @staticmethod
    def _build(cols: dict[str, list], topic_ix: dict[str, int], code_end: dict[int, int]) -> pa.Table:
        tix = np.asarray(cols["tix"], np.int64)
        part = np.asarray(cols["partition"], np.int64)
        off = np.asarray(cols["offset"], np.int64)
        codes = tix * _K + part
        uniq, inv = np.unique(codes, return_inverse=True) if len(codes) else (np.array([], np.int64), codes)
        ends = np.asarray([code_end[int(u)] for u in uniq], np.int64)
        keep = off < ends[inv] if len(codes) else np.zeros(0, bool)
        order = np.lexsort((off, codes))
        order = order[keep[order]]
        names = np.asarray(sorted(topic_ix, key=topic_ix.__getitem__), dtype=object)
        take = pa.array(order)
        ts = pa.array(np.asarray(cols["ts"], np.int64)[order] * 1000).cast(pa.timestamp("us", tz="UTC"))
        return pa.table([pa.array(cols["key"], pa.binary()).take(take), pa.array(cols["value"], pa.binary()).take(take),
                         pa.DictionaryArray.from_arrays(pa.array(tix[order].astype(np.int32)),
                                                        pa.array(list(names), pa.string())).cast(pa.string()),
                         pa.array(part[order].astype(np.int32)), pa.array(off[order]), ts], schema=SCHEMA)

    def _check_errors(self, msgs: list, todo: dict, last: dict) -> list[tuple[str, int]]:
        """Raise on real errors; partitions that ended before their range's end (a data loss that
        fail_on_data_loss=False skips) are returned, to stop waiting for them."""
        ended = []
        for m in msgs:
            err = m.error()
            if err is None:
                continue
            k = (m.topic(), m.partition())
            if err.code() == err._PARTITION_EOF:
                if k in todo and m.offset() < todo[k][1]:
                    self._loss(k[0], k[1], max(m.offset(), last[k] + 1), todo[k][1], f"the partition ends at {m.offset()}")
                    ended.append(k)
                continue
            raise DataLossError(self.fail(f"topic {k[0]!r}, partition {k[1]}: reading from offset "
                                          f"{last.get(k, -2) + 1} failed: {err}"))
        return ended


def _last_offset(tix: list, parts: list, offs: list, t: int, p: int) -> int | None:
    """The largest offset of (topic index t, partition p) in a consumed chunk (scanning from the end)."""
    for i in range(len(offs) - 1, -1, -1):
        if parts[i] == p and tix[i] == t:
            return offs[i]
    return None

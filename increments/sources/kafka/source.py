"""KafkaSource: options, the confluent-kafka client, and its three halves (offsets, consume, parse)."""
from __future__ import annotations

from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer

from ..base import Source
from .consume import SCHEMA, KafkaConsume, _Reader
from .offsets import KafkaOffsets, _starting_offsets
from .parse import _Parsed, KafkaParse


class KafkaSource(KafkaParse, KafkaConsume, KafkaOffsets, Source):
    """read_stream.kafka(...): see the package docstring for the contracts."""
    _per_query = {"read_metrics": {}, "_consumer": None, "_reader_pair": None, "_target": None,
                  "_parse_schema": None,
                  "_parse_options": None, "_parse_while_reading": False, "_parsed": None, "_pool": None,
                  "_admin": None, "_epochs": None, "_ids_ahead": None, "_stash": None}

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
        self._reader_pair: list | None = None       # read()'s two consumers (_readers)
        self._target: dict | None = None
        self._parse_schema: pa.Schema | None = None   # set by parse_json on the value column
        self._parse_options: Any = None
        self._parse_while_reading = False         # enable_read_ahead: the local runner only
        self._parsed: _Parsed | None = None       # the last read's pre-parse, until take_parsed
        self._pool: Any = None
        self._admin: Any = None
        self._epochs: list | None = None          # sources/<i>/topic_ids.json, cached
        self._ids_ahead: tuple | None = None      # (asked at, DescribeTopics futures): topics.request_topic_ids
        self._stash: dict | None = None           # (topic, partition) -> consume._Stash (a rest read ahead) or None

    # -- description / schema -------------------------------------------------------------------
    @property
    def description(self) -> str:
        return f"KafkaV2[Subscribe[{','.join(self.topics)}]]"

    def schema(self) -> pa.Schema:
        return SCHEMA

    # -- client ---------------------------------------------------------------------------------
    def _client(self):
        """The consumer for probes (ends, watermarks); reads use _readers()."""
        if self._consumer is None:
            self._consumer = self._new_consumer()
        return self._consumer

    def _readers(self) -> list:
        """Two consumers read() uses in turn (consume.py, _read_ranges); never the probe client."""
        if self._reader_pair is None:
            self._reader_pair = [self._new_consumer(_Reader), self._new_consumer(_Reader)]
        return self._reader_pair

    def _new_consumer(self, kind: Any = Consumer):
        conf = {"bootstrap.servers": self.bootstrap_servers, "group.id": "increments-unused",
                "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "error",
                "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
                # per consumer; two read consumers can hold a prefetch at once (consume.py,
                # _read_ranges): together the 256 MiB one consumer held before
                "queued.max.messages.kbytes": 128 * 1024, "fetch.wait.max.ms": 5,
                # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1 s) once its
                # local queue holds queued.min.messages; a reader draining a range then sits idle
                # for up to a second (measured: 5x slower reads, at random)
                "fetch.queue.backoff.ms": 5}
        conf.update(self.client_config)
        return kind(conf)

    def close(self) -> None:
        self._parsed = None
        self._ids_ahead = None
        self._stash = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        for c in [self._consumer] + (self._reader_pair or []):
            if c is not None:
                c.close()
        self._consumer = self._reader_pair = None

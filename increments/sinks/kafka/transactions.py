"""The Kafka sink's exactly-once machinery: the transactions probe and the batch marker.

The marker of a query's last written batch is the committed offset of the consumer group
`<prefix><query id>` on partition 0 of the marker topic (default `increments_sink_markers`):
offset = batch id + 1, metadata = {"query_id", "batch_id"}. Exactly once, it is committed INSIDE the
batch's Kafka transaction (send_offsets_to_transaction: Kafka's own read-process-write mechanism),
so it becomes visible exactly when the batch's records do, and never without them. It is read with
isolation.level=read_committed (OffsetFetch require_stable), after init_transactions() has fenced
every older producer of the query's transactional id and completed or aborted its transaction.

Retention: the broker keeps a group's offsets for offsets.retention.minutes (7 days by default)
after the last commit. A query that crashed between the Kafka commit of batch N and commits[N] and
is restarted after that would write batch N again; restart within that time (or raise it).

The probe (once per checkpoint and bootstrap servers, cached in the checkpoint under
sinks/kafka/): a transaction that produces one record to the marker topic and is aborted after the
broker acknowledged the record, then a committed one; a read_committed consumer from the aborted
record's offset must see the committed record first. A broker that refuses init_transactions, or
serves the aborted record (Tansu 0.6.0 does: it accepts and fences, but its aborts do not hide
records), has no usable transactions.
"""
from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ... import storage

MARKER_TOPIC = "increments_sink_markers"
#: client properties a marker consumer or admin client shares with the producer (connection, auth)
_SHARED_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "client.", "socket.", "broker.",
                    "api.version", "metadata.", "reconnect.", "retry.backoff", "debug", "log_level",
                    "enable.ssl", "connections.max", "client.dns")


def shared_conf(conf: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in conf.items() if k.startswith(_SHARED_PREFIXES)}


def kafka_error(e: BaseException) -> Any:
    """The KafkaError inside a KafkaException (or None)."""
    return e.args[0] if getattr(e, "args", None) and hasattr(e.args[0], "code") else None


def ensure_topic(conf: dict[str, Any], topic: str, timeout: float = 30.0) -> None:
    """Create `topic` (one partition) unless it exists."""
    admin = AdminClient(shared_conf(conf))
    if topic in admin.list_topics(timeout=timeout).topics:
        return
    for rf in (-1, 1):          # -1: the broker's default replication factor (Kafka >= 2.4)
        try:
            admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=rf)])[topic].result(timeout)
            return
        except Exception as e:  # noqa: BLE001 - sorted out by the error code below
            err = kafka_error(e)
            code = err.code() if err is not None else None
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if code in (KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.INVALID_CONFIG) and rf == -1:
                continue
            raise


def probe(conf: dict[str, Any], marker_topic: str, transactional_id: str, timeout: float = 30.0) -> str | None:
    """None when the broker honours transactions, else what failed (module doc)."""
    offsets: list[int] = []
    p = Producer({**conf, "transactional.id": transactional_id})
    try:
        p.init_transactions(timeout)
        p.begin_transaction()
        p.produce(marker_topic, value=b"probe: aborted", key=b"increments-probe", partition=0,
                  on_delivery=lambda err, msg: offsets.append(msg.offset() if err is None else -1))
        p.flush(timeout)
        p.abort_transaction(timeout)
        p.begin_transaction()
        p.produce(marker_topic, value=b"probe: committed", key=b"increments-probe", partition=0)
        p.commit_transaction(timeout)
    except KafkaException as e:
        return f"its transactions fail ({e.args[0]})"
    if not offsets or offsets[0] < 0:
        return "the probe record was not acknowledged"
    c = Consumer({**shared_conf(conf), "group.id": transactional_id, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(marker_topic, 0, offsets[0])])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            if m.value() == b"probe: aborted":
                return ("a read_committed consumer was served a record of an aborted transaction "
                        f"({marker_topic}[0] offset {m.offset()})")
            return None
        return "a read_committed consumer saw nothing of a committed transaction within the timeout"
    finally:
        c.close()


def probe_cached(checkpoint: Any, conf: dict[str, Any], marker_topic: str, transactional_id: str) -> str | None:
    """probe() once per (checkpoint, bootstrap servers): the verdict is kept in the checkpoint at
    sinks/kafka/probe-<hash of the servers>.json (create-only; a racing writer's identical verdict wins)."""
    servers = str(conf.get("bootstrap.servers", ""))
    name = f"probe-{hashlib.sha1(servers.encode()).hexdigest()[:16]}.json"
    loc = storage.location(checkpoint).child("sinks", "kafka") if checkpoint is not None else None
    if loc is not None and loc.exists(name):
        return loc.read_json(name).get("problem")
    ensure_topic(conf, marker_topic)
    problem = probe(conf, marker_topic, transactional_id)
    if loc is not None and problem is None:     # a failed probe is not cached: the broker may be fixed
        try:
            loc.write_json(name, {"bootstrap_servers": servers, "problem": None, "probed_at_ms": int(time.time() * 1000)},
                           create_only=True)
        except FileExistsError:
            pass
    return problem


class Marker:
    """The query's batch marker (module doc) on one consumer of the query's group."""

    def __init__(self, conf: dict[str, Any], group: str, topic: str, query_id: str):
        self.topic, self.query_id = topic, query_id
        self.consumer = Consumer({**shared_conf(conf), "group.id": group, "isolation.level": "read_committed",
                                  "enable.auto.commit": False})

    def _tp(self, batch_id: int | None = None):
        if batch_id is None:
            return TopicPartition(self.topic, 0)
        return TopicPartition(self.topic, 0, int(batch_id) + 1,
                              metadata=json.dumps({"query_id": self.query_id, "batch_id": int(batch_id)}))

    def last_batch(self, timeout: float = 30.0) -> int | None:
        """The last batch id the marker holds, or None (no batch written, or the offsets expired)."""
        tp = self.consumer.committed([self._tp()], timeout=timeout)[0]
        if tp.error is not None:
            raise KafkaException(tp.error)
        return None if tp.offset < 0 else int(tp.offset) - 1

    def offsets(self, batch_id: int):
        """What a batch's transaction commits: [marker offset], the group's metadata."""
        return [self._tp(batch_id)], self.consumer.consumer_group_metadata()

    def commit_plain(self, batch_id: int) -> None:
        """The marker without a transaction (at-least-once delivery)."""
        self.consumer.commit(offsets=[self._tp(batch_id)], asynchronous=False)

    def close(self) -> None:
        self.consumer.close()

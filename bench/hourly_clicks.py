"""Throughput of the README's hourly-clicks query, side by side with references measured in this run.

    .venv/bin/python bench/hourly_clicks.py [--events 2000000] [--files 20] [--rounds 3] [--spark-python PATH] [--kafka]

Workload: ~2,000,000 click events in 20 files (JSON lines, and the same in Parquet), time moving
forward file by file with some disorder and late clicks. The query: watermark 15 minutes, 1-hour
tumbling count per campaign, append mode, one file per batch (max_files_per_trigger=1),
trigger(available_now=True), foreach_batch collecting the output, state_partitions=2 (as Spark's
reference runs with 2 shuffle partitions). After a warm-up run (imports, page cache), the engine and
DuckDB run --rounds times alternating and the median wall time of each is reported, with the process
CPU seconds of that run (all threads).

References: (1) DuckDB computing the same hourly counts over the same files in one query (the
single-node limit); (2) Apache Spark Structured Streaming (local[2], shuffle partitions 2, same
query, maxFilesPerTrigger=1, availableNow), run only when --spark-python points at a Python with
pyspark 4 and Java 17 is present (skipped with a message otherwise): its windows and counts are
compared with the engine's, one by one; (3) the no-protocol loop (run_floor): the same files read by
the engine's readers (two decoded ahead) and aggregated by Arrow, merged in a dict, nothing durable
-- what the libraries alone do here, so that engine minus loop is the protocol's and state's share;
(4) Parquet only: the durable floor (run_durable_floor), the run's fsynced writes alone on this
disk (per batch the offsets and commits rows in an SQLite WAL file with synchronous=FULL, one
changelog per state partition written create-only, in parallel).
Also: peak memory (ru_maxrss), state rows at the end with the watermark vs the same query without
a watermark (update mode), and the per-batch overhead of an empty batch.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402

SCHEMA = "campaign_id STRING, user_id STRING, event_time TIMESTAMP"


def generate(root: str, events: int, files: int, campaigns: int = 50, seed: int = 11) -> tuple[str, str]:
    """JSON and Parquet copies of the same events; file k covers minutes [k*30, k*30+30) with disorder."""
    rnd = random.Random(seed)
    jdir, pdir = os.path.join(root, "json"), os.path.join(root, "parquet")
    os.makedirs(jdir), os.makedirs(pdir)
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc).timestamp()
    per = events // files
    for f in range(files):
        base = t0 + f * 1800
        ts = [base + rnd.uniform(-600, 1800) - (rnd.uniform(0, 7200) if rnd.random() < 0.01 else 0) for _ in range(per)]
        camp = [f"c{rnd.randrange(campaigns)}" for _ in range(per)]
        user = [f"u{rnd.randrange(100000)}" for _ in range(per)]
        iso = [dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ") for t in ts]
        with open(os.path.join(jdir, f"clicks-{f:04d}.json"), "w") as fh:
            fh.writelines(json.dumps({"campaign_id": c, "user_id": u, "event_time": e}) + "\n"
                          for c, u, e in zip(camp, user, iso))
        table = pa.table({"campaign_id": camp, "user_id": user,
                          "event_time": pa.array([int(t * 1e6) for t in ts], pa.timestamp("us", tz="UTC"))})
        pq.write_table(table, os.path.join(pdir, f"clicks-{f:04d}.parquet"))
    return jdir, pdir


#: the engine's state partitions in this bench: Spark's reference runs with spark.sql.shuffle.partitions=2
STATE_PARTITIONS = 2


def run_engine(path: str, fmt: str, watermark: bool = True, mode: str = "append") -> tuple[float, int, dict]:
    clicks = inc.read_stream.files(path, fmt, SCHEMA, max_files_per_trigger=1)
    if watermark:
        clicks = clicks.with_watermark("event_time", "15 minutes")
    out = {"rows": 0, "windows": []}

    def sink(table, batch_id):
        out["rows"] += table.num_rows
        if table.num_rows:
            w = table.column("window").combine_chunks()
            out["windows"] += zip(w.field("start").cast("int64").to_pylist(), w.field("end").cast("int64").to_pylist(),
                                  table.column("campaign_id").to_pylist(), table.column("count").to_pylist())
    chk = tempfile.mkdtemp(prefix="bench-chk-")
    t0 = time.perf_counter()
    q = (clicks.group_by(F.window("event_time", "1 hour"), "campaign_id").count().write_stream
         .output_mode(mode).option("state_partitions", STATE_PARTITIONS).foreach_batch(sink)
         .checkpoint_location(chk).trigger(available_now=True).start())
    q.await_termination()
    elapsed = time.perf_counter() - t0
    last = q.last_progress
    shutil.rmtree(chk, ignore_errors=True)
    run_engine.windows = sorted(out["windows"])   # (start us, end us, campaign, count) of the last run
    return elapsed, out["rows"], last


def run_floor(path: str, fmt: str) -> tuple[float, int]:
    """The same 20 one-file batches read and aggregated in a loop with no protocol at all: the
    engine's own readers (only the two columns read, two files decoded ahead on two threads as the
    engine's read-ahead does), Arrow's hash aggregation per file, partials merged into a dict, and
    windows emitted once the watermark passes their end. Nothing durable, no state store: what the
    libraries alone do on this machine (the engine's floor)."""
    from concurrent.futures import ThreadPoolExecutor
    import numpy as np
    from increments.sources import file_formats
    from increments.types import parse_schema
    schema, cols = parse_schema(SCHEMA), ["campaign_id", "event_time"]
    files = sorted(os.path.join(path, f) for f in os.listdir(path))
    hour, delay = 3600 * 1_000_000, 15 * 60 * 1_000_000

    def decode(f):
        t = (file_formats.read_json_lines(f, schema, cols) if fmt == "json" else file_formats.read_parquet(f, schema, cols))
        us = t.column("event_time").cast("int64").to_numpy()
        ws = us - np.mod(us, hour)
        g = pa.table({"ws": ws, "c": t.column("campaign_id")}).group_by(["ws", "c"], use_threads=False).aggregate(
            [([], "count_all")])
        return g, int(us.max())
    t0 = time.perf_counter()
    state: dict = {}
    emitted, wm, late_wm = 0, 0, 0        # batch k: late rows by W(k-1), eviction by W(k)

    def evict() -> int:
        done = [key for key in state if key[0] + hour <= wm]
        for key in done:
            del state[key]
        return len(done)
    with ThreadPoolExecutor(2) as pool:
        for g, mx in pool.map(decode, files):
            for ws, c, k in zip(*(g.column(i).to_pylist() for i in range(3))):
                if ws + hour > late_wm:
                    state[(ws, c)] = state.get((ws, c), 0) + k
            emitted += evict()
            late_wm, wm = wm, max(wm, mx - delay)
    emitted += evict()                      # the trailing no-data batch
    return time.perf_counter() - t0, emitted


def run_durable_floor(batches: int, partitions: int = STATE_PARTITIONS, rounds: int = 5) -> float:
    """The writes the protocol must make durable in this run, done alone on the same disk, median of
    `rounds` (seconds): per batch the offsets row committed in an SQLite WAL file with synchronous=FULL
    (as the engine's SQLite log), one ~3 kB changelog per state partition written create-only through
    the engine's storage layer (file + directory fsync) on as many threads, then the commits row. No
    Python of the engine, no data: the disk's share of the per-batch floor (issue 19)."""
    import sqlite3
    from concurrent.futures import ThreadPoolExecutor
    from increments.storage import location
    data = os.urandom(3000)

    def once(pool) -> float:
        d = tempfile.mkdtemp(prefix="bench-floor-")
        loc = location(d)
        c = sqlite3.connect(os.path.join(d, "log.db"), isolation_level=None)
        c.execute("pragma journal_mode=wal")
        c.execute("pragma synchronous=FULL")
        c.execute("create table o (b integer primary key, t text)")
        c.execute("create table m (b integer primary key, t text)")
        t0 = time.perf_counter()
        for b in range(batches):
            c.execute("insert into o values (?, ?)", (b, "x" * 300))
            futs = [pool.submit(loc.write_bytes, f"state/0/{p}/{b}.t.changelog", data, create_only=True)
                    for p in range(1, partitions)]
            loc.write_bytes(f"state/0/0/{b}.t.changelog", data, create_only=True)
            for f in futs:
                f.result()
            c.execute("insert into m values (?, ?)", (b, "x" * 300))
        el = time.perf_counter() - t0
        c.close()
        shutil.rmtree(d, ignore_errors=True)
        return el
    with ThreadPoolExecutor(max(1, partitions - 1)) as pool:
        once(pool)
        return statistics.median(once(pool) for _ in range(rounds))


def run_engine_kafka(bootstrap: str, topic: str, per_batch: int) -> tuple[float, int]:
    clicks = (inc.read_stream.kafka(bootstrap, topic=topic, max_offsets_per_trigger=per_batch)
              .parse_json(SCHEMA).with_watermark("event_time", "15 minutes"))
    out = {"rows": 0}
    chk = tempfile.mkdtemp(prefix="bench-chk-")
    t0 = time.perf_counter()
    q = (clicks.group_by(F.window("event_time", "1 hour"), "campaign_id").count().write_stream
         .output_mode("append").option("state_partitions", STATE_PARTITIONS)
         .foreach_batch(lambda t, b: out.__setitem__("rows", out["rows"] + t.num_rows))
         .checkpoint_location(chk).trigger(available_now=True).start())
    q.await_termination()
    elapsed = time.perf_counter() - t0
    shutil.rmtree(chk, ignore_errors=True)
    return elapsed, out["rows"]


def kafka_workload(json_dir: str, n: int, files: int, a_rounds: int = 3) -> None:
    """The same events in a Kafka topic (a Tansu broker started here): the engine's rows/s beside a
    raw confluent-kafka consume of the same topic."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from broker import create_topic, start_tansu
    from kafka_read import raw_consume
    from confluent_kafka import Producer
    proc, bootstrap = start_tansu()
    try:
        topic = create_topic(bootstrap, partitions=4)
        prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 100000,
                         "queue.buffering.max.messages": 2000000, "compression.type": "none"})
        t0 = time.perf_counter()
        i = 0
        for name in sorted(os.listdir(json_dir)):
            with open(os.path.join(json_dir, name), "rb") as fh:
                for line in fh:
                    prod.produce(topic, value=line.rstrip(b"\n"), partition=i % 4)
                    i += 1
                    if i % 100000 == 0:
                        prod.flush()
        prod.flush()
        print(f"produced {i} events to Kafka in {time.perf_counter() - t0:.1f} s")
        run_engine_kafka(bootstrap, topic, n // files)   # warm-up
        secs, rows = sorted(run_engine_kafka(bootstrap, topic, n // files) for _ in range(a_rounds))[a_rounds // 2]
        # the reference: the faster of two raw loops (kafka_read.py explains them)
        raw = max(raw_consume(bootstrap, topic, 4, i), raw_consume(bootstrap, topic, 4, i, fetch_wait_ms=5, chunk=500))
        print(f"{'increments kafka':34s} {secs:8.2f} {i / secs:12,.0f}   ({rows} windows emitted)")
        print(f"{'raw confluent-kafka consume':34s} {i / raw:8.2f} {raw:12,.0f}")
        print(f"  ratio increments/raw consume rows/s (kafka, whole query): {i / secs / raw:.2f}x")
    finally:
        proc.kill()


def run_duckdb(path: str, fmt: str) -> tuple[float, int]:
    from increments.sql import duckdb_connection
    con = duckdb_connection()
    src = (f"read_json('{path}/*.json', format='newline_delimited', columns={{'campaign_id': 'VARCHAR', "
           f"'user_id': 'VARCHAR', 'event_time': 'TIMESTAMPTZ'}})" if fmt == "json" else f"read_parquet('{path}/*.parquet')")
    t0 = time.perf_counter()
    n = con.sql(f"SELECT time_bucket(INTERVAL 1 HOUR, event_time) AS w, campaign_id, count(*) FROM {src} "
                "GROUP BY ALL").to_arrow_table().num_rows
    return time.perf_counter() - t0, n


SPARK_SCRIPT = r'''
import sys, time
from pyspark.sql import SparkSession, functions as F
path, fmt = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
schema = "campaign_id STRING, user_id STRING, event_time TIMESTAMP"
df = spark.readStream.format(fmt).schema(schema).option("maxFilesPerTrigger", 1).load(path)
agg = df.withWatermark("event_time", "15 minutes").groupBy(F.window("event_time", "1 hour"), "campaign_id").count()
rows = []
def sink(b, i):
    rows.extend(tuple(r) for r in b.select(F.unix_micros("window.start"), F.unix_micros("window.end"), "campaign_id",
                                           "count").collect())
import json, tempfile
t0 = time.perf_counter()
q = (agg.writeStream.outputMode("append").foreachBatch(sink).option("checkpointLocation", tempfile.mkdtemp())
     .trigger(availableNow=True).start())
q.awaitTermination()
secs = time.perf_counter() - t0
json.dump(sorted(rows), open(sys.argv[3], "w"))
print("SPARK_RESULT", secs, len(rows))
'''


def run_spark(spark_python: str | None, path: str, fmt: str) -> tuple[float, int, list] | None:
    """(seconds, windows emitted, the windows sorted: (start us, end us, campaign, count)), or None."""
    if not spark_python:
        try:
            import pyspark  # noqa: F401  (pip install -e '.[spark]')
            spark_python = sys.executable
        except ImportError:
            return None
    if not os.path.exists(spark_python) or not shutil.which("java"):
        return None
    script = os.path.join(tempfile.mkdtemp(), "spark_ref.py")
    open(script, "w").write(SPARK_SCRIPT)
    rows_file = script + ".rows.json"
    p = subprocess.run([spark_python, script, path, fmt, rows_file], capture_output=True, text=True, timeout=1800)
    for line in p.stdout.splitlines():
        if line.startswith("SPARK_RESULT"):
            _, secs, rows = line.split()
            return float(secs), int(rows), [tuple(r) for r in json.load(open(rows_file))]
    print("spark reference failed:", p.stderr[-1500:])
    return None


def _timed(fn):
    """(fn(), process CPU seconds it took: every thread, DuckDB's and Arrow's included)."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    out = fn()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return out, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)


def _median_run(runs: list) -> tuple:
    """The run with the median wall time (the first element of each result)."""
    return sorted(runs, key=lambda r: r[0][0])[len(runs) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--spark-python", default=os.environ.get("SPARK_PYTHON"))
    ap.add_argument("--keep", default=None, help="directory to generate into (kept)")
    ap.add_argument("--kafka", action="store_true", help="also run the workload from a Kafka topic")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per comparison (median reported)")
    a = ap.parse_args()
    root = a.keep or tempfile.mkdtemp(prefix="bench-clicks-")
    if not os.path.exists(os.path.join(root, "json")):
        t0 = time.perf_counter()
        generate(root, a.events, a.files)
        print(f"generated {a.events} events in {a.files} files (json + parquet) in {time.perf_counter() - t0:.1f} s")
    jdir, pdir = os.path.join(root, "json"), os.path.join(root, "parquet")
    n = a.events
    print(f"engine: local runner, state_partitions={STATE_PARTITIONS} (Spark: shuffle partitions 2); "
          f"each figure is the median of {a.rounds} rounds after a warm-up run, engine and DuckDB alternating")
    print(f"{'workload':34s} {'seconds':>8s} {'rows/s':>12s}  {'cpu s':>6s}")
    results = {}
    targets = {"json": 0.7, "parquet": 0.5}
    for fmt, path in (("json", jdir), ("parquet", pdir)):
        run_engine(path, fmt), run_duckdb(path, fmt), run_floor(path, fmt)   # warm-up: imports, page cache
        eng, ddbs, floors = [], [], []
        for _ in range(a.rounds):
            eng.append(_timed(lambda: run_engine(path, fmt)))
            ddbs.append(_timed(lambda: run_duckdb(path, fmt)))
            floors.append(_timed(lambda: run_floor(path, fmt)))
        (secs, out_rows, last), ecpu = _median_run(eng)
        windows = run_engine.windows
        (ddb, ddb_groups), dcpu = _median_run(ddbs)
        (floor, floor_rows), fcpu = _median_run(floors)
        results[fmt] = (secs, ddb)
        print(f"{'increments ' + fmt:34s} {secs:8.2f} {n / secs:12,.0f}  {ecpu:6.2f}   ({out_rows} windows emitted)")
        print(f"{'duckdb one-shot ' + fmt:34s} {ddb:8.2f} {n / ddb:12,.0f}  {dcpu:6.2f}   ({ddb_groups} groups)")
        print(f"{'no-protocol loop ' + fmt:34s} {floor:8.2f} {n / floor:12,.0f}  {fcpu:6.2f}   ({floor_rows} windows emitted)")
        print(f"  ratio increments/duckdb rows/s ({fmt}): {ddb / secs:.2f}x   (target >= {targets[fmt]}x)")
        print(f"  ratio no-protocol loop/duckdb ({fmt}): {ddb / floor:.2f}x;  protocol and state per batch: "
              f"{(secs - floor) / a.files * 1000:.1f} ms")
        if fmt == "parquet":
            dur = run_durable_floor(a.files + 1)
            print(f"  durable floor (the protocol's fsynced writes alone, {a.files + 1} batches): {dur * 1000:.1f} ms "
                  f"per run, {dur / (a.files + 1) * 1000:.2f} ms per batch")
        spark = run_spark(a.spark_python, path, fmt)
        if spark is None:
            print(f"  spark reference ({fmt}): skipped (pip install -e '.[spark]' or pass --spark-python; needs Java 17)")
        else:
            print(f"{'spark structured streaming ' + fmt:34s} {spark[0]:8.2f} {n / spark[0]:12,.0f}   ({spark[1]} windows emitted)")
            print(f"  ratio increments/spark rows/s ({fmt}): {spark[0] / secs:.2f}x   (target >= 50x)")
            same = windows == spark[2]
            print(f"  same windows and counts as Spark ({fmt}): {'yes' if same else 'NO'} ({len(windows)} vs {len(spark[2])})")
            if not same:
                diff = sorted(set(windows) ^ set(spark[2]))[:5]
                print(f"  first differences: {diff}")
        if fmt == "json":
            op = (last["state_operators"] or [{}])[0]
            state_wm = op.get("num_rows_total")
    _, _, last_nowm = run_engine(jdir, "json", watermark=False, mode="update")
    state_nowm = (last_nowm["state_operators"] or [{}])[0].get("num_rows_total")
    print(f"state rows at the end: {state_wm} with the watermark, {state_nowm} without (update mode)")
    if a.kafka:
        kafka_workload(jdir, n, a.files, a.rounds)
    print(f"peak memory (ru_maxrss): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()

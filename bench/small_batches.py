"""A near-empty stateful batch against the disk's floor (issue 33 item 1), measured as whole runs.

    .venv/bin/python bench/small_batches.py [--files 40] [--per-file 50] [--rounds 3]
        [--stores memory,rocksdb] [--sources files,kafka] [--profile OUT.txt]

Workload: the hourly-clicks query (watermark 15 minutes, 1-hour tumbling count per campaign, append,
2 state partitions, Parquet sink) fed small batches: 40 JSON files of 50 clicks read one per batch
(max_files_per_trigger=1), or the same 2,000 clicks in a Kafka topic read 50 offsets per batch
(Tansu broker). Each run is timed from start() to the end of await_termination() (building the
runtime, opening the log, every batch, the trailing no-data batch, closing), and divided by its
number of batches: what a one-minute trigger's small batches cost, start-up included.

The durable floor, measured in the same run alternating with the engine: per batch, what the
protocol must make durable, done alone on the same disk with no engine code -- the offsets row and
the commits row, each an autocommit INSERT into an SQLite WAL file with synchronous=FULL (as the
engine's log), and the small files a batch writes durably through the engine's storage layer
(create-only: temp file, fsync, link, directory fsync): one per state partition (the changelogs,
written side by side on two threads as the state commit does), the sink's data file and its manifest
entry, and for the files source the seen-files entry (what strace -f shows the engine fsync per batch:
5 files and 2 SQLite commits for the files source, 4 files for Kafka). The target: engine per batch
<= 3x the floor per batch.

--profile OUT: py-spy (100 Hz, --threads --idle) over extra runs of every case, written as raw
folded stacks; bench/README.md has the tables read from them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402

SCHEMA = "campaign_id STRING, user_id STRING, event_time TIMESTAMP"
PARTITIONS = 2


def generate(root: str, files: int, per_file: int) -> str:
    from bench.hourly_clicks import generate as gen
    d = os.path.join(root, f"small-{files}x{per_file}")
    if not os.path.isdir(d):
        gen(d, files * per_file, files)
    return os.path.join(d, "json")


def run_query(source: str, store: str, path: str | None, kafka: tuple[str, str] | None, per_file: int) -> tuple[float, int]:
    if source == "files":
        frame = inc.read_stream.files(path, "json", SCHEMA, max_files_per_trigger=1)
    else:
        frame = (inc.read_stream.kafka(kafka[0], topic=kafka[1], max_offsets_per_trigger=per_file)
                 .parse_json(SCHEMA))
    work = tempfile.mkdtemp(prefix="bench-small-")
    c0 = time.process_time()
    t0 = time.perf_counter()
    q = (frame.with_watermark("event_time", "15 minutes").group_by(F.window("event_time", "1 hour"), "campaign_id")
         .count().write_stream.format("parquet").output_mode("append").option("state_partitions", PARTITIONS)
         .option("state_store", store).checkpoint_location(os.path.join(work, "chk"))
         .trigger(available_now=True).start(os.path.join(work, "out")))
    q.await_termination()
    elapsed = time.perf_counter() - t0
    run_query.cpu = time.process_time() - c0       # every thread of the process, this run only
    if q.exception() is not None:
        raise q.exception()
    batches = q.last_progress["batch_id"] + 1
    shutil.rmtree(work, ignore_errors=True)
    return elapsed, batches


class Floor:
    """The durable writes of one batch alone (module doc), ``files`` small files per batch of which
    ``PARTITIONS`` are written side by side."""

    def __init__(self, files: int):
        from increments import storage
        self.dir = tempfile.mkdtemp(prefix="bench-small-floor-")
        self.db = sqlite3.connect(os.path.join(self.dir, "log.db"), isolation_level=None, check_same_thread=False)
        self.db.execute("pragma journal_mode=wal").fetchall()
        self.db.execute("pragma synchronous=FULL")
        self.db.execute("create table o (b integer primary key, t text)")
        self.db.execute("create table c (b integer primary key, t text)")
        self.locs = [storage.location(os.path.join(self.dir, f"f{i}")) for i in range(files)]
        self.pool = ThreadPoolExecutor(PARTITIONS)
        self.n = 0
        self.data = os.urandom(2000)

    def run(self, batches: int) -> float:
        t0 = time.perf_counter()
        for _ in range(batches):
            self.n += 1
            b = self.n
            self.db.execute("insert into o values (?, ?)", (b, "x" * 400))
            for loc in self.locs[PARTITIONS:]:            # seen-files entry, sink data file and manifest
                loc.write_bytes(f"{b}.bin", self.data, create_only=True)
            futs = [self.pool.submit(loc.write_bytes, f"{b}.changelog", self.data, create_only=True)
                    for loc in self.locs[:PARTITIONS]]
            for f in futs:
                f.result()
            self.db.execute("insert into c values (?, ?)", (b, "x" * 900))
        return time.perf_counter() - t0


def load() -> str:
    return "load %.1f/%.1f/%.1f" % os.getloadavg()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--per-file", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stores", default="memory,rocksdb")
    ap.add_argument("--sources", default="files,kafka")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--profile-runs", type=int, default=5)
    ap.add_argument("--dir", default=os.environ.get("INCREMENTS_BENCH_DIR") or tempfile.gettempdir())
    a = ap.parse_args()
    if a.profile:                         # py-spy over this same script's runs (no floor, no Kafka start-up)
        cmd = ["py-spy", "record", "-r", "100", "--threads", "--idle", "-f", "raw", "-o", a.profile, "--",
               sys.executable, os.path.abspath(__file__), "--rounds", str(a.profile_runs), "--stores", a.stores,
               "--sources", a.sources, "--files", str(a.files), "--per-file", str(a.per_file)]
        subprocess.run(cmd, check=True)
        return
    path = generate(a.dir, a.files, a.per_file)
    sources = a.sources.split(",")
    kafka = None
    proc = None
    if "kafka" in sources:
        from broker import create_topic, produce, start_tansu
        proc, bootstrap = start_tansu()
        topic = create_topic(bootstrap)
        rows = []
        for name in sorted(os.listdir(path)):
            with open(os.path.join(path, name)) as f:
                rows += [line.rstrip("\n") for line in f]
        produce(bootstrap, topic, rows)
        kafka = (bootstrap, topic)
    try:
        cases = [(s, st) for s in sources for st in a.stores.split(",")]
        floors = {"files": Floor(PARTITIONS + 3), "kafka": Floor(PARTITIONS + 2)}
        for s, st in cases:                              # warm-up: imports, DuckDB, the first RocksDB open
            run_query(s, st, path, kafka, a.per_file)
        per: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        floor_per: dict[str, list[float]] = {s: [] for s in sources}
        for r in range(a.rounds):
            for s, st in cases:
                secs, batches = run_query(s, st, path, kafka, a.per_file)
                per.setdefault((s, st), []).append(secs / batches)
                cpu.setdefault((s, st), []).append(run_query.cpu / batches)
                fl = floors[s].run(batches) / batches
                floor_per[s].append(fl)
                print(f"round {r} {s:5s} {st:7s}: {secs:6.3f} s for {batches} batches = {secs / batches * 1000:6.2f} ms "
                      f"a batch (cpu {run_query.cpu / batches * 1000:5.2f} ms); floor {fl * 1000:5.2f} ms a batch   "
                      f"({load()})", flush=True)
        print(f"\nnear-empty stateful batches ({a.files} x {a.per_file} clicks, windowed count, {PARTITIONS} "
              f"partitions, Parquet sink), medians of {a.rounds} rounds   ({load()}):")
        for s, st in cases:
            e, fl = statistics.median(per[(s, st)]), statistics.median(floor_per[s])
            c = statistics.median(cpu[(s, st)])
            print(f"  {s:5s} {st:7s} {e * 1000:7.2f} ms a batch | durable floor {fl * 1000:5.2f} ms | "
                  f"{e / fl:5.2f}x the floor (target <= 3x) | above the floor {(e - fl) * 1000:6.2f} ms, "
                  f"CPU {c * 1000:5.2f} ms a batch")
    finally:
        if proc is not None:
            proc.kill()


if __name__ == "__main__":
    main()

"""Soak: does a long-running query's memory stay flat? (issue 28 item 10)

    .venv/bin/python bench/soak.py [--minutes 10 | --hours 4] [--source files|kafka] [--sink parquet|delta|discard]
                                   [--rate 800] [--files-per-second 4] [--keys 5000] [--warmup 3]
                                   [--tracemalloc] [--dagster] [--dagster-baseline OPS] [--with-baseline OPS]
                                   [--diagnose] [--keep-check-executions]

The query: a windowed aggregation (with_watermark 10 s, 1-minute tumbling windows, group by the
window and one of --keys keys, count and sum) in append mode, trigger processing_time="1 second",
on the local runner (or, with --dagster, one in-process Dagster run per batch of the query's
fanned-out job, state_partitions 2). A feeder thread in this process writes --rate rows a second
as --files-per-second small JSON-lines files (renamed into place), or produces them to a topic of
the Tansu broker fixture (tests/broker.py) with --source kafka; event times are the wall clock,
so windows close and state stays bounded (~1.3 windows x keys rows).

Every 10 s the soak samples this process: resident memory (VmRSS), open file descriptors,
threads, the checkpoint's size on disk and the state rows of the last progress. At the end it
prints the samples once a minute and the memory slope: a least-squares line through the RSS
samples after --warmup minutes, in MB per minute (0 is flat; the issue's probe saw +3.6 MB/min
before the fixes), with the fds/threads/checkpoint range over the same span. With --tracemalloc
it also prints the 15 allocation sites that grew most between the first sample after warm-up
and the last (Python allocations only: RocksDB, DuckDB and Arrow's own memory are not traced).

Dagster's own share (--dagster): `--dagster-baseline OPS` runs, instead of the query, a trivial job
of OPS ops (a chain of no-op ops; the last one logs an asset materialization and one asset check
evaluation, as the batch job's commit does) on the same kind of instance (ephemeral, in-process
execution, runs deleted as they end) at the same run rate (one run a second at most, or --runs-per-minute), with no feeder.
`--with-baseline OPS` runs that baseline in a child process beside the query's soak, for the same
minutes, and prints both reports and both slopes (same machine, same load). The soak deletes each
run with its asset check executions, as retention.py does (instance.delete_run leaves them behind,
and an ephemeral instance keeps them in memory); `--keep-check-executions` leaves them, to see what
they cost.

`--diagnose` adds, per sample, the Python heap (tracemalloc's traced bytes when --tracemalloc, else
the gc's object count), what malloc_trim(0) gives back (RSS before - after: freed memory glibc had
kept, i.e. fragmentation rather than live data), and with --dagster the rows and SQLite pages of the
ephemeral instance's storages; at the end the object types whose count grew most after the warm-up.

The soak stops by itself (its duration) and stops the feeder, the query and the broker it started.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402

SCHEMA = "key STRING, amount BIGINT, event_time TIMESTAMP"
SAMPLE_S = 10


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def arrow_mb() -> float:
    """Bytes the Arrow memory pool holds for live buffers (not what the allocator keeps cached)."""
    import pyarrow as pa
    return pa.total_allocated_bytes() / 1e6


def duckdb_mb() -> float:
    """DuckDB's own accounting of the process's database (its buffer manager), from a cursor of
    this thread (a cursor is its own connection to the one database)."""
    from increments import sql
    if sql._db is None:
        return 0.0
    cur = sql._db.cursor()
    try:
        return (cur.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0] or 0) / 1e6
    finally:
        cur.close()


def malloc_trim() -> float:
    """RSS given back by glibc's malloc_trim(0) (MB): memory free in the allocator but kept mapped."""
    import ctypes
    before = rss_mb()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        return 0.0
    return before - rss_mb()


def glibc_mb() -> dict[str, float]:
    """glibc's totals over all its arenas (mallinfo2, glibc >= 2.33), MB: `in_use` (live native
    allocations), `free` (freed but kept in its heaps: fragmentation), `heaps` (their total)."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return {"in_use": 0.0, "free": 0.0, "heaps": 0.0, "mmapped": 0.0}
    fn.restype = MallInfo2
    m = fn()
    return {"in_use": m.uordblks / 1e6, "free": m.fordblks / 1e6, "heaps": m.arena / 1e6, "mmapped": m.hblkhd / 1e6}


def native_mb() -> dict[str, float]:
    """Native memory the Python heap does not see: SQLite's (sqlite3_memory_used, every in-memory
    database of the process: the ephemeral Dagster instance's storages) and RocksDB's shared block
    cache and memtable budget (state/working.py)."""
    import ctypes
    out = {"sqlite": 0.0, "rocks_cache": 0.0, "rocks_memtables": 0.0}
    try:
        lib = ctypes.CDLL("libsqlite3.so.0")
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        out["sqlite"] = lib.sqlite3_memory_used() / 1e6
    except OSError:
        pass
    try:
        from state import working
        if working._shared:
            out["rocks_cache"] = working._shared["cache"].get_usage() / 1e6
            out["rocks_memtables"] = working._shared["wbm"].get_usage() / 1e6
    except Exception:  # noqa: BLE001 - a diagnostic only
        pass
    return out


def mappings() -> dict[str, float]:
    """Resident memory by kind (anonymous vs file-backed, /proc/self/smaps_rollup) and the number of
    memory mappings: a growing file-backed part or mapping count is memory-mapped files kept mapped."""
    out = {"anon": 0.0, "file": 0.0, "maps": 0}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Anonymous:"):
                    out["anon"] = int(line.split()[1]) / 1024
                elif line.startswith("Rss:"):
                    out["file"] = int(line.split()[1]) / 1024
        out["file"] -= out["anon"]
        with open("/proc/self/maps") as f:
            out["maps"] = sum(1 for _ in f)
    except OSError:
        pass
    return out


def type_counts() -> dict[str, int]:
    import gc
    counts: dict[str, int] = {}
    for o in gc.get_objects():
        t = type(o)
        name = f"{t.__module__}.{t.__qualname__}"
        counts[name] = counts.get(name, 0) + 1
    return counts


def instance_rows(inst) -> dict[str, float]:
    """Rows per table of an ephemeral instance's in-memory SQLite storages, and their size (MB)."""
    import sqlalchemy as sa
    out: dict[str, float] = {}
    for label, storage in (("run", inst.run_storage), ("event", inst.event_log_storage),
                           ("schedule", inst.schedule_storage)):
        engine = getattr(storage, "_engine", None) or getattr(storage, "_held_conn", None)
        if storage is None or engine is None:
            continue
        conn_cm = storage.connect() if label in ("run", "schedule") else storage.index_connection()
        with conn_cm as conn:
            pages = conn.execute(sa.text("PRAGMA page_count")).scalar() or 0
            size = conn.execute(sa.text("PRAGMA page_size")).scalar() or 0
            free = conn.execute(sa.text("PRAGMA freelist_count")).scalar() or 0
            out[f"{label}_db_MB"] = round(pages * size / 1e6, 2)
            out[f"{label}_free_MB"] = round(free * size / 1e6, 2)
            for (name,) in conn.execute(sa.text("SELECT name FROM sqlite_master WHERE type='table'")).fetchall():
                n = conn.execute(sa.text(f'SELECT count(*) FROM "{name}"')).scalar()
                if n:
                    out[f"{label}.{name}"] = n
    return out


def du_mb(path: str) -> float:
    total = 0
    for dirpath, _, files in os.walk(path):
        for fn in files:
            try:
                total += os.lstat(os.path.join(dirpath, fn)).st_size
            except OSError:
                pass
    return total / 1e6


def lines(n: int, keys: int, rnd: random.Random) -> list[str]:
    now = datetime.now(timezone.utc).isoformat()
    return [json.dumps({"key": f"k{rnd.randrange(keys)}", "amount": i, "event_time": now}) for i in range(n)]


class Feeder(threading.Thread):
    """Writes `rate` rows a second as `per_second` files (or Kafka messages) until stopped."""

    def __init__(self, args, inp: str | None, bootstrap: str | None, topic: str | None):
        super().__init__(daemon=True, name="soak-feeder")
        self.args, self.inp, self.bootstrap, self.topic = args, inp, bootstrap, topic
        self.stop = threading.Event()
        self.rows = 0

    def run(self) -> None:
        per_file = max(1, self.args.rate // self.args.files_per_second)
        period = 1.0 / self.args.files_per_second
        producer = None
        if self.bootstrap:
            from confluent_kafka import Producer
            producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        seq, nxt, rnd = 0, time.monotonic(), random.Random(28)
        while not self.stop.is_set():
            batch = lines(per_file, self.args.keys, rnd)
            if producer is not None:
                for v in batch:
                    producer.produce(self.topic, value=v.encode())
                producer.poll(0)
            else:
                name = f"{time.time_ns():020d}-{seq:09d}.json"
                tmp = os.path.join(self.inp, "_" + name)
                with open(tmp, "w") as f:
                    f.write("\n".join(batch) + "\n")
                os.rename(tmp, os.path.join(self.inp, name))
            seq += 1
            self.rows += per_file
            nxt += period
            self.stop.wait(max(0.0, nxt - time.monotonic()))
        if producer is not None:
            producer.flush(30)


def build(args, work: str, bootstrap: str | None, topic: str | None):
    if args.source == "kafka":
        frame = (inc.read_stream.kafka(bootstrap_servers=bootstrap, topic=topic, starting_offsets="earliest")
                 .parse_json(SCHEMA))
    else:
        frame = inc.read_stream.files(os.path.join(work, "in"), "json", SCHEMA)
    agg = (frame.with_watermark("event_time", "10 seconds")
           .group_by(F.window("event_time", "1 minute"), "key")
           .agg(F.count().alias("n"), F.sum("amount").alias("total")))
    if args.query == "stateless":
        agg = frame.select("key", "amount", "event_time")
    w = (agg.write_stream.output_mode("append").checkpoint_location(os.path.join(work, "chk")).query_name("soak")
         .option("state_store", args.state_store))
    if args.sink == "discard":
        return w.foreach_batch(lambda table, batch_id: None)
    return w.format(args.sink)


def slope(samples: list[dict], key: str) -> float:
    xs = [s["t"] / 60 for s in samples]
    ys = [s[key] for s in samples]
    if len(xs) < 2:
        return float("nan")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


def run_local(args, work: str, bootstrap, topic, sample) -> None:
    q = build(args, work, bootstrap, topic).trigger(processing_time="1 second").start(os.path.join(work, "out"))
    try:
        sample(lambda: (q.last_progress or {}), lambda: q.exception())
    finally:
        q.stop()
    if q.exception() is not None:
        raise q.exception()


def baseline_job(ops: int):
    """A trivial job of `ops` no-op ops in a chain, in-process; the last logs one asset
    materialization and one asset check evaluation (as the batch job's commit does)."""
    import dagster as dg

    def make(i: int):
        @dg.op(name=f"noop_{i}", ins={"x": dg.In(dg.Nothing)} if i else {})
        def noop(context):
            if i == ops - 1:
                context.log_event(dg.AssetMaterialization(asset_key="soak_baseline", metadata={"i": i}))
                context.log_event(dg.AssetCheckEvaluation(asset_key=dg.AssetKey("soak_baseline"),
                                                          check_name="baseline", passed=True))
        return noop
    chain = [make(i) for i in range(ops)]

    @dg.job(name="soak_baseline", executor_def=dg.in_process_executor)
    def job():
        out = None
        for op in chain:
            out = op() if out is None else op(out)
    return job


def run_dagster(args, work: str, bootstrap, topic, sample) -> None:
    """One in-process Dagster run of the query's fanned-out batch job (one partition op per state
    partition) per second, on one ephemeral instance (its run history is deleted as it goes, as a
    deployment's retention would: it is Dagster's memory, not the query's). With
    --dagster-baseline OPS the job is the trivial one of baseline_job instead of the query's."""
    import dagster as dg

    from orchestration import dagster_internals as di

    if args.dagster_baseline:
        job = baseline_job(args.dagster_baseline)
    else:
        from orchestration import build_definitions

        def factory():
            return build(args, work, bootstrap, topic).option("state_partitions", 2).trigger(processing_time="1 second")
        factory.__name__ = "soak"
        defs = build_definitions([(factory, {"path": os.path.join(work, "out"), "sensor_status": "stopped",
                                             "fanout": True})], asset_root=work)
        job = defs.get_job_def("soak_batch")
    inst = dg.DagsterInstance.ephemeral()
    INSTANCE.append(inst)
    last: dict = {"runs": 0}
    stop = threading.Event()
    error: list[BaseException] = []

    pending: list = []            # count_types' requests, served between two runs
    BETWEEN_RUNS.append(pending)

    def loop() -> None:
        try:
            while not stop.is_set():
                while pending:
                    pending.pop()()
                t0 = time.monotonic()
                res = job.execute_in_process(instance=inst, raise_on_error=True)
                run = inst.get_run_by_id(res.run_id)
                bid = run.tags.get("increments/batch_id")
                last["batch_id"] = int(bid) if bid is not None else last.get("batch_id")
                last["runs"] += 1
                if args.dagster_baseline:
                    last["batch_id"] = last["runs"]
                if not args.keep_check_executions:      # what retention.py deletes with a run
                    di.delete_check_executions(inst, [res.run_id])
                inst.delete_run(res.run_id)
                stop.wait(max(0.0, 60.0 / args.runs_per_minute - (time.monotonic() - t0)))
            while pending:
                pending.pop()()
        except BaseException as e:  # noqa: BLE001 - reported by the sampler
            error.append(e)
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        sample(lambda: last, lambda: error[0] if error else None)
    finally:
        stop.set()
        t.join()


INSTANCE: list = []     # the ephemeral instance of run_dagster (for --diagnose)
TYPES: list = []        # gc object counts by type after the warm-up and at the end (--diagnose)
#: with --dagster, the run loop's hook: takes TYPES' counts between two runs (a run in flight holds
#: its plan, config snapshots and step handles: thousands of objects that are not kept)
BETWEEN_RUNS: list = []


def between_runs(fn):
    """fn(), between two runs when a Dagster run loop is active (else now); its result."""
    if not BETWEEN_RUNS:
        return fn()
    done, out = threading.Event(), []

    def call() -> None:
        try:
            out.append(fn())
        finally:
            done.set()
    BETWEEN_RUNS[0].append(call)
    if not done.wait(120):
        raise RuntimeError("the run loop did not come between two runs within 120 s")
    return out[0]


def count_types() -> None:
    """Appends the gc object counts to TYPES, between two runs when a run loop is active."""
    TYPES.append(between_runs(type_counts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--hours", type=float, default=None, help="overrides --minutes")
    ap.add_argument("--source", choices=("files", "kafka"), default="files")
    ap.add_argument("--sink", choices=("parquet", "delta", "discard"), default="parquet")
    ap.add_argument("--rate", type=int, default=800, help="rows per second")
    ap.add_argument("--files-per-second", type=int, default=4)
    ap.add_argument("--keys", type=int, default=5000)
    ap.add_argument("--warmup", type=float, default=3.0, help="minutes left out of the slope")
    ap.add_argument("--state-store", choices=("rocksdb", "memory"), default="rocksdb")
    ap.add_argument("--query", choices=("window", "stateless"), default="window",
                    help="stateless: the same input, no aggregation (to tell the state's share)")
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--tracemalloc-frames", type=int, default=25)
    ap.add_argument("--dagster", action="store_true", help="one in-process Dagster run per batch (fanned out)")
    ap.add_argument("--dagster-baseline", type=int, default=0, metavar="OPS",
                    help="with --dagster: a trivial job of OPS no-op ops instead of the query (Dagster's own memory)")
    ap.add_argument("--with-baseline", type=int, default=0, metavar="OPS",
                    help="with --dagster: run --dagster-baseline OPS in a child process beside this soak")
    ap.add_argument("--runs-per-minute", type=float, default=60.0,
                    help="with --dagster: at most this many runs a minute (default 60: the trigger's 1 s); "
                         "--with-baseline passes it to the baseline")
    ap.add_argument("--keep-check-executions", action="store_true",
                    help="with --dagster: do not delete runs' asset check executions (delete_run leaves them)")
    ap.add_argument("--diagnose", action="store_true",
                    help="per sample: Python heap, malloc_trim's give-back, instance rows; at the end the object "
                         "types that grew")
    ap.add_argument("--work", default=None, help="working directory (default: a new temporary one, removed)")
    args = ap.parse_args()
    minutes = args.hours * 60 if args.hours is not None else args.minutes
    work = args.work or tempfile.mkdtemp(prefix="soak-")
    os.makedirs(os.path.join(work, "in"), exist_ok=True)
    broker = bootstrap = topic = None
    if args.source == "kafka":
        from broker import create_topic, start_tansu
        os.makedirs(os.path.join(work, "tansu"), exist_ok=True)
        broker, bootstrap = start_tansu(os.path.join(work, "tansu"))
        topic = create_topic(bootstrap, "soak")
    if args.tracemalloc:
        import tracemalloc
        tracemalloc.start(args.tracemalloc_frames)
    child = None
    if args.with_baseline:
        import subprocess
        cmd = [sys.executable, os.path.abspath(__file__), "--dagster", "--dagster-baseline", str(args.with_baseline),
               "--minutes", str(minutes), "--warmup", str(args.warmup),
               "--runs-per-minute", str(args.runs_per_minute)] + (["--diagnose"] if args.diagnose else []) \
            + (["--keep-check-executions"] if args.keep_check_executions else [])
        child_out = tempfile.TemporaryFile("w+")      # not a pipe: Dagster's logs would fill it and block the child
        child = subprocess.Popen(cmd, stdout=child_out, stderr=subprocess.DEVNULL, text=True)
    load0 = os.getloadavg()
    samples: list[dict] = []
    snaps: list = []
    feeder = Feeder(args, os.path.join(work, "in"), bootstrap, topic)

    diag_live = args.diagnose and not args.dagster_baseline

    def sample(progress, failed) -> None:
        t0 = time.monotonic()
        if not args.dagster_baseline:
            feeder.start()
        while time.monotonic() - t0 < minutes * 60:
            time.sleep(SAMPLE_S)
            err = failed()
            if err is not None:
                raise RuntimeError(f"the query failed: {err}")
            p = progress()
            state = sum(op.get("num_rows_total", 0) for op in p.get("state_operators", []))
            s = {"t": time.monotonic() - t0, "rss": rss_mb(), "arrow": arrow_mb(), "duckdb": duckdb_mb(),
                 "fds": fds(), "threads": threads(),
                 "chk": du_mb(os.path.join(work, "chk")), "state": state, "batch": p.get("batch_id"),
                 "fed": feeder.rows}
            if args.diagnose:
                import gc
                if args.tracemalloc:
                    import tracemalloc
                    s["py"] = tracemalloc.get_traced_memory()[0] / 1e6
                else:
                    s["py"] = len(gc.get_objects()) / 1e3          # thousands of gc-tracked objects
                s.update(native_mb())
                s.update(mappings())
                s["trim"] = malloc_trim()
                s["rss_trim"] = rss_mb()
                s.update({f"glibc_{k}": v for k, v in glibc_mb().items()})
                if INSTANCE:
                    s["inst"] = between_runs(lambda: instance_rows(INSTANCE[0]))   # not while a run writes
                if s["t"] >= args.warmup * 60 and not TYPES:
                    count_types()
            samples.append(s)
            if diag_live:
                print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items()
                               if k != "inst"), flush=True)
            if args.tracemalloc and s["t"] >= args.warmup * 60 and not snaps:
                import tracemalloc
                snaps.append(tracemalloc.take_snapshot())
        if args.tracemalloc:
            import tracemalloc
            snaps.append(tracemalloc.take_snapshot())
        if args.diagnose:
            count_types()
        feeder.stop.set()
        if feeder.is_alive():
            feeder.join()

    try:
        (run_dagster if args.dagster else run_local)(args, work, bootstrap, topic, sample)
    finally:
        feeder.stop.set()
        if broker is not None:
            broker.kill()
            broker.wait()
    ours = report(args, minutes, samples, snaps, load0)
    if child is not None:
        child.wait()
        child_out.seek(0)
        out = child_out.read()
        print("\n-- the Dagster baseline beside it (child process):\n" + out.rstrip())
        import re
        m = re.search(r"memory slope after .*?: ([+-][0-9.]+) MB/min", out)
        theirs = float(m.group(1)) if m else float("nan")
        per = re.search(r"([+-][0-9.]+) MB per 1,000 runs", out)
        print(f"\nslopes, same minutes and machine: the query's fanned-out runs {ours:+.2f} MB/min, "
              f"the {args.with_baseline}-op no-op job {theirs:+.2f} MB/min"
              + (f" ({per.group(1)} MB per 1,000 runs)" if per else ""))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


def report(args, minutes: float, samples: list[dict], snaps: list, load0: tuple = (0.0, 0.0, 0.0)) -> float:
    """Prints the samples and the slopes; returns the RSS slope after the warm-up (MB/min)."""
    mode = (f"dagster baseline ({args.dagster_baseline} no-op ops)" if args.dagster_baseline else
            "dagster fan-out" if args.dagster else "local runner")
    load1 = os.getloadavg()
    feed = "no input, " if args.dagster_baseline else (f"{args.source} -> {args.sink}, {args.rate} rows/s as "
                                                        f"{args.files_per_second}/s, {args.keys} keys, ")
    print(f"soak: {mode}, {feed}{minutes:g} min; ended {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
          f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} at the start, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at the end")
    diag = args.diagnose
    print(f"{'min':>6} {'batch':>7} {'rss MB':>8} {'arrow':>6} {'duckdb':>6} {'fds':>5} {'thr':>4} {'chk MB':>7} "
          f"{'state':>7} {'fed':>9}" + (f" {'py':>7} {'trim MB':>7} {'rss>trim':>8} {'sqlite':>6}" if diag else ""))
    shown = -1
    for s in samples:
        if int(s["t"] // 60) != shown or s is samples[-1]:
            shown = int(s["t"] // 60)
            print(f"{s['t'] / 60:6.1f} {s['batch'] if s['batch'] is not None else '-':>7} {s['rss']:8.1f} "
                  f"{s['arrow']:6.1f} {s['duckdb']:6.1f} {s['fds']:5d} {s['threads']:4d} {s['chk']:7.1f} {s['state']:7d} {s['fed']:9d}"
                  + (f" {s['py']:7.1f} {s['trim']:7.1f} {s['rss_trim']:8.1f} {s['sqlite']:6.1f}" if diag else ""))
    warm = [s for s in samples if s["t"] >= args.warmup * 60]
    if len(warm) < 2:
        print("too short for a slope after the warm-up")
        return float("nan")
    rng = lambda k: f"{min(s[k] for s in warm):g}..{max(s[k] for s in warm):g}"  # noqa: E731
    runs = (warm[-1].get("batch") or 0) - (warm[0].get("batch") or 0) if args.dagster else None
    print(f"memory slope after {args.warmup:g} min warm-up: {slope(warm, 'rss'):+.2f} MB/min "
          f"(rss {warm[0]['rss']:.0f} -> {warm[-1]['rss']:.0f} MB; Arrow pool {slope(warm, 'arrow'):+.2f}, DuckDB "
          f"{slope(warm, 'duckdb'):+.2f} MB/min); fds {rng('fds')}, threads {rng('threads')}, "
          f"checkpoint {slope(warm, 'chk'):+.3f} MB/min ({warm[-1]['chk']:.1f} MB), state rows {rng('state')}"
          + (f"; {runs / ((warm[-1]['t'] - warm[0]['t']) / 60):.1f} runs/min, "
             f"{(warm[-1]['rss'] - warm[0]['rss']) / runs * 1000:+.1f} MB per 1,000 runs" if runs else ""))
    if diag:
        print(f"diagnose: python heap {slope(warm, 'py'):+.3f} {'MB' if args.tracemalloc else 'k objects'}/min; "
              f"RSS after malloc_trim(0) {slope(warm, 'rss_trim'):+.2f} MB/min; malloc_trim gave back "
              f"{statistics.fmean(s['trim'] for s in warm):.1f} MB per sample on average; SQLite "
              f"{slope(warm, 'sqlite'):+.2f} MB/min ({warm[0]['sqlite']:.1f} -> {warm[-1]['sqlite']:.1f} MB), RocksDB "
              f"block cache {slope(warm, 'rocks_cache'):+.2f} ({warm[-1]['rocks_cache']:.1f} MB), memtables "
              f"{slope(warm, 'rocks_memtables'):+.2f} MB/min ({warm[-1]['rocks_memtables']:.1f} MB); resident anonymous "
              f"{slope(warm, 'anon'):+.2f} MB/min, file-backed {slope(warm, 'file'):+.2f} MB/min, mappings "
              f"{warm[0]['maps']} -> {warm[-1]['maps']}; glibc in use {slope(warm, 'glibc_in_use'):+.2f} MB/min "
              f"({warm[-1]['glibc_in_use']:.1f} MB), free but kept (fragmentation) {slope(warm, 'glibc_free'):+.2f} MB/min "
              f"({warm[-1]['glibc_free']:.1f} MB)")
        for x in warm:
            x["rest"] = x["anon"] - x["rocks_cache"] - x["rocks_memtables"] - x["sqlite"] - x["arrow"] - x["duckdb"]
        print(f"diagnose: resident anonymous memory less RocksDB's cache and memtables, SQLite, Arrow and DuckDB: "
              f"{slope(warm, 'rest'):+.2f} MB/min ({warm[0]['rest']:.1f} -> {warm[-1]['rest']:.1f} MB)")
        if warm[-1].get("inst"):
            a, b = warm[0]["inst"], warm[-1]["inst"]
            print("diagnose: the instance's storages after the warm-up -> at the end: "
                  + ", ".join(f"{k} {a.get(k, 0)} -> {b.get(k, 0)}" for k in sorted(set(a) | set(b))))
        if len(TYPES) == 2:
            grew = sorted(((TYPES[1].get(k, 0) - TYPES[0].get(k, 0), k) for k in set(TYPES[0]) | set(TYPES[1])),
                          reverse=True)[:12]
            print("diagnose: gc object types that grew most after the warm-up: "
                  + ", ".join(f"{k} {d:+d}" for d, k in grew))
    if len(snaps) >= 2:
        print("tracemalloc: the 15 lines that grew most after the warm-up")
        for st in snaps[-1].compare_to(snaps[0], "lineno")[:15]:
            fr = st.traceback[0]
            print(f"  {st.size_diff / 1e6:+8.3f} MB {st.count_diff:+8d} blocks  {fr.filename.rsplit('/', 3)[-1]}:{fr.lineno}")
        print("tracemalloc: the 8 tracebacks that grew most")
        for st in snaps[-1].compare_to(snaps[0], "traceback")[:8]:
            print(f"  {st.size_diff / 1e6:+8.3f} MB {st.count_diff:+8d} blocks  "
                  + " <- ".join(f"{fr.filename.rsplit('/', 2)[-1]}:{fr.lineno}" for fr in reversed(list(st.traceback)[-6:])))
    return slope(warm, "rss")


if __name__ == "__main__":
    main()

"""High-cardinality state in one batch (issue 33 item 3): 2M rows into 1M distinct keys.

    .venv/bin/python bench/high_cardinality.py [--rows 2000000] [--keys 1000000] [--files 4]
        [--rounds 1] [--spark-python /path/to/python-with-pyspark] [--only count,dedup] [--stores memory,rocksdb]
        [--key-type bigint|string] [--batches 1]
(profile: py-spy record --threads -o out.svg -- python bench/high_cardinality.py --only count --stores memory)

Input: Parquet files (k, event_time), every key at least once, the rest random repeats, shuffled;
event times spread over one hour. One batch (available_now, every file in it; ``--batches N``: the
files split evenly into N data batches, as max files per trigger on both sides), foreach_batch doing
nothing, 2 state partitions:
  * count: ``group_by("k").count()``, update mode
  * dedup: ``with_watermark("event_time", "10 minutes").drop_duplicates_within_watermark(["k"])``
Each workload on the memory and the RocksDB store, timed from start() to the end of the query (start
and close included), beside, in the same run: Spark 4 Structured Streaming on the same files and query
(local[2], shuffle partitions 2, HDFS-backed and RocksDB state stores, one JVM, after a warm-up query;
its foreachBatch writes the batch to Spark's noop sink: it must run the batch's plan, as the engine's
foreach_batch receives the computed table),
and DuckDB's one-shot ``SELECT k, count(*) FROM read_parquet(...) GROUP BY k`` (the reference for the
memory store: target within 4x). Prints each time and the ratios; the machine's load average beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STATE_PARTITIONS = 2


def generate(root: str, rows: int, keys: int, files: int, key_type: str, seed: int = 5) -> str:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    d = os.path.join(root, f"in-{rows}-{keys}-{files}-{key_type}")
    if os.path.isdir(d) and len(os.listdir(d)) == files:
        return d
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    rng = np.random.default_rng(seed)
    k = np.concatenate([np.arange(keys, dtype=np.int64), rng.integers(0, keys, max(rows - keys, 0))])
    rng.shuffle(k)
    t0 = 1_700_000_000_000_000
    ts = t0 + np.sort(rng.integers(0, 3_600_000_000, len(k)))
    per = -(-len(k) // files)
    for f in range(files):
        kk = k[f * per:(f + 1) * per]
        col = pa.array(kk) if key_type == "bigint" else pa.array([f"event-{x:012d}" for x in kk.tolist()])
        pq.write_table(pa.table({"k": col, "event_time": pa.array(ts[f * per:(f + 1) * per], pa.timestamp("us", tz="UTC"))}),
                       os.path.join(d, f"part-{f:03d}.parquet"))
    return d


def _discard(table, batch_id) -> None:
    pass


def run_engine(path: str, workload: str, store: str, key_type: str, files_per_batch: int | None = None) -> tuple[float, dict]:
    import increments as inc
    schema = f"k {'BIGINT' if key_type == 'bigint' else 'STRING'}, event_time TIMESTAMP"
    frame = inc.read_stream.files(path, "parquet", schema, max_files_per_trigger=files_per_batch)
    if workload == "count":
        out = frame.group_by("k").count()
        mode = "update"
    else:
        out = frame.with_watermark("event_time", "10 minutes").drop_duplicates_within_watermark(["k"])
        mode = "append"
    chk = tempfile.mkdtemp(prefix="bench-hc-")
    c0 = time.process_time()
    t0 = time.perf_counter()
    q = (out.write_stream.foreach_batch(_discard).output_mode(mode)
         .option("state_partitions", STATE_PARTITIONS).option("state_store", store)
         .checkpoint_location(chk).trigger(available_now=True).start())
    q.await_termination()
    secs = time.perf_counter() - t0
    run_engine.cpu = time.process_time() - c0
    progress = [p for p in q.recent_progress if p.get("numInputRows")]
    shutil.rmtree(chk, ignore_errors=True)
    return secs, (progress[0] if progress else {})


def run_duckdb(path: str) -> tuple[float, int]:
    from increments.sql import duckdb_connection
    con = duckdb_connection()
    c0 = time.process_time()
    t0 = time.perf_counter()
    n = con.sql(f"SELECT k, count(*) FROM read_parquet('{path}/*.parquet') GROUP BY k").to_arrow_table().num_rows
    run_duckdb.cpu = time.process_time() - c0
    return time.perf_counter() - t0, n


SPARK_SCRIPT = r'''
import json, sys, tempfile, time
from pyspark.sql import SparkSession, functions as F
path, key_type, runs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
per_batch = int(sys.argv[5]) if len(sys.argv) > 5 else 0
spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
         .config("spark.network.timeout", "900s").config("spark.rpc.askTimeout", "900s")   # a loaded machine
         .config("spark.executor.heartbeatInterval", "60s")
         .config("spark.ui.enabled", "false").config("spark.driver.memory", "3g").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
schema = f"k {'BIGINT' if key_type == 'bigint' else 'STRING'}, event_time TIMESTAMP"
PROVIDERS = {"hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
             "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}
def jvm_cpu():
    """CPU seconds of the JVM (every thread: tasks, JIT, GC), from /proc (None where there is none)."""
    try:
        pid = spark.sparkContext._gateway.proc.pid
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        import os
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except Exception:
        return None
def once(workload, store, p):
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[store])
    r = spark.readStream.format("parquet").schema(schema)
    df = (r.option("maxFilesPerTrigger", per_batch) if per_batch and p == path else r).load(p)
    if workload == "count":
        out, mode = df.groupBy("k").count(), "update"
    else:
        out, mode = df.withWatermark("event_time", "10 minutes").dropDuplicatesWithinWatermark(["k"]), "append"
    c0 = jvm_cpu()
    t0 = time.perf_counter()
    # the batch's rows computed and dropped (Spark's noop sink): a foreachBatch that never runs its
    # DataFrame fails Spark 4.3's state-store commit validation (STATE_STORE_COMMIT_VALIDATION_FAILED)
    q = (out.writeStream.outputMode(mode).foreachBatch(lambda b, i: b.write.format("noop").mode("overwrite").save())
         .option("checkpointLocation", tempfile.mkdtemp()).trigger(availableNow=True).start())
    q.awaitTermination()
    secs = time.perf_counter() - t0
    c1 = jvm_cpu()
    return secs, (c1 - c0 if c0 is not None and c1 is not None else -1.0)
warm = sys.argv[4]
for w in ("count", "dedup"):
    for s in ("hdfs", "rocksdb"):
        once(w, s, warm)        # warm-up: classes loaded, code paths JIT-compiled
for workload, store in runs:
    print("SPARK_RESULT", workload, store, *once(workload, store, path), flush=True)
'''


def run_spark(spark_python: str, path: str, warm: str, key_type: str, runs: list, per_batch: int = 0) -> tuple[dict, dict]:
    """({(workload, store): best wall s}, {(workload, store): best CPU s of the JVM, if known})."""
    script = os.path.join(tempfile.mkdtemp(), "spark_hc.py")
    open(script, "w").write(SPARK_SCRIPT)
    p = subprocess.run([spark_python, script, path, key_type, json.dumps(runs), warm, str(per_batch)],
                       capture_output=True, text=True, timeout=3600)
    out: dict = {}
    cpu: dict = {}
    got = 0
    for line in p.stdout.splitlines():
        if line.startswith("SPARK_RESULT"):
            _, w, s, secs, c = line.split()
            out[(w, s)] = min(out.get((w, s), float(secs)), float(secs))     # the best of the rounds
            if float(c) >= 0:
                cpu[(w, s)] = min(cpu.get((w, s), float(c)), float(c))
            got += 1
    if got < len(runs):
        print("spark reference failed:", p.stderr[-2000:])
    return out, cpu


def load() -> str:
    return "load %.1f/%.1f/%.1f" % os.getloadavg()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", default="count,dedup")
    ap.add_argument("--stores", default="memory,rocksdb")
    ap.add_argument("--key-type", default="bigint", choices=("bigint", "string"))
    ap.add_argument("--spark-python", default=os.environ.get("SPARK_PYTHON"))
    ap.add_argument("--batches", type=int, default=1, help="data batches: the files split evenly (max files per trigger)")
    ap.add_argument("--dir", default=os.environ.get("INCREMENTS_BENCH_DIR") or tempfile.gettempdir())
    a = ap.parse_args()
    path = generate(a.dir, a.rows, a.keys, a.files, a.key_type)
    if a.batches < 1 or a.files % a.batches:
        ap.error("--batches must divide --files")
    per_batch = a.files // a.batches if a.batches > 1 else None
    warm = generate(a.dir, 2000, 1000, 1, a.key_type)
    workloads = a.only.split(",")
    stores = a.stores.split(",")
    print(f"high cardinality: {a.rows:,} rows into {a.keys:,} keys ({a.key_type}), {a.files} Parquet files, "
          f"{a.batches} data batch(es), {STATE_PARTITIONS} state partitions, foreach_batch doing nothing   ({load()})")
    for w in workloads:                       # warm-up: imports, DuckDB, the first RocksDB open
        for s in stores:
            run_engine(warm, w, s, a.key_type)
    duck, duck_cpu = min((run_duckdb(path)[0], run_duckdb.cpu) for _ in range(3))
    print(f"duckdb one-shot GROUP BY k: {duck:.2f} s   cpu {duck_cpu:6.2f} s (best of 3)   ({load()})")
    eng: dict[tuple[str, str], float] = {}
    eng_cpu: dict[tuple[str, str], float] = {}
    for r in range(a.rounds):
        for w in workloads:
            for s in stores:
                secs, _ = run_engine(path, w, s, a.key_type, per_batch)
                eng[(w, s)] = min(eng.get((w, s), secs), secs)
                eng_cpu[(w, s)] = min(eng_cpu.get((w, s), run_engine.cpu), run_engine.cpu)
                print(f"engine {w:5s} {s:7s}: {secs:6.2f} s   cpu {run_engine.cpu:6.2f} s   ({load()})")
    sp: dict = {}
    sp_cpu: dict = {}
    if a.spark_python and os.path.exists(a.spark_python) and shutil.which("java"):
        runs = [(w, s) for _ in range(a.rounds) for w in workloads for s in ("hdfs", "rocksdb")]
        t0 = time.perf_counter()
        sp, sp_cpu = run_spark(a.spark_python, path, warm, a.key_type, runs, per_batch or 0)
        for (w, s), secs in sp.items():
            print(f"spark  {w:5s} {s:7s}: {secs:6.2f} s   cpu {sp_cpu.get((w, s), float('nan')):6.2f} s (the JVM)   ({load()})")
        print(f"  (the Spark process took {time.perf_counter() - t0:.0f} s with its start and warm-up)")
    else:
        print("spark reference: skipped (pass --spark-python with pyspark 4 and Java 17)")
    print(f"\nsummary ({load()}):")
    for w in workloads:
        for s in stores:
            if (w, s) not in eng:
                continue
            line = f"  {w:5s} {s:7s} {eng[(w, s)]:6.2f} s"
            for ss in ("hdfs", "rocksdb"):
                if (w, ss) in sp:
                    line += f" | vs Spark {ss} {sp[(w, ss)]:.2f} s: {sp[(w, ss)] / eng[(w, s)]:.2f}x"
                    if (w, ss) in sp_cpu:
                        line += f" (CPU {sp_cpu[(w, ss)]:.2f} / {eng_cpu[(w, s)]:.2f} s: {sp_cpu[(w, ss)] / eng_cpu[(w, s)]:.2f}x)"
            if s == "memory" and w == "count":
                line += (f" | {eng[(w, s)] / duck:.2f}x DuckDB's GROUP BY ({duck:.2f} s; target <= 4x; in CPU seconds "
                         f"{eng_cpu[(w, s)] / max(duck_cpu, 1e-9):.2f}x: {eng_cpu[(w, s)]:.2f} vs {duck_cpu:.2f})")
            print(line)
    print("  targets: >= 2x Spark for count and dedup on both stores (CPU: both sides' every thread, best of the rounds)")


if __name__ == "__main__":
    main()

"""Memory per 1,000 batch runs in one process: where does a long-lived worker's memory go? (issue 28 item 10)

    .venv/bin/python bench/runs_memory.py [--runs 1500] [--every 250] [--skip 500]
                                          [--mode dagster|local] [--state-store rocksdb|memory]

soak.py measures memory against the clock; this measures it against runs, as fast as the machine
goes, which is what a process executing many runs pays (an in-process Dagster run per batch, a warm
Celery worker, the local runner restarted per batch). Each run first writes one small JSON-lines
file (200 rows over 5,000 keys, event time now) and then executes one batch of soak.py's query
(windowed count and sum, 2 state partitions, Parquet sink):

- `--mode dagster`: `execute_in_process` of the query's fanned-out batch job on one ephemeral
  instance; each run is deleted with its check executions as it ends (as retention.py does);
- `--mode local`: a new query per batch (`trigger(available_now=True).start()` and
  await_termination): a new runtime, new state store provider, new working copies every run.

Every --every runs, after gc.collect() and glibc's malloc_trim(0), it prints resident memory, glibc's
own accounting (mallinfo2: bytes `in use`, bytes `free` but kept in its heaps, the heaps' total),
RocksDB's shared block cache, gc-tracked Python objects, Python's allocated blocks and its
small-object arenas. At the end:
the RSS slope after --skip runs in MB per 1,000 runs, the same for glibc's in-use and free bytes, and
the resident anonymous memory by owner (from /proc/self/smaps: glibc's main heap and thread arenas,
mimalloc's arena, the rest) at the first and the last sample after --skip.

How to read it: glibc `in use` flat and `free` growing is fragmentation (memory freed by the process,
kept by the allocator in pieces it cannot give back), not a leak; `in use` growing is a leak in native
code; Python objects or blocks growing is a leak in Python.
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import logging
import os
import random
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import soak

_LIBC = ctypes.CDLL("libc.so.6")


def rss_after_trim() -> float:
    _LIBC.malloc_trim(0)
    return soak.rss_mb()


def anon_mappings() -> collections.Counter:
    """Resident MB of anonymous memory by owner, told from /proc/self/smaps: glibc's main heap
    ([heap]), glibc's thread arenas (64 MiB-aligned mappings of at most 64 MiB), mimalloc's arena
    (Arrow's memory pool reserves 1 GiB at a time), and the rest (Python's object arenas, thread
    stacks, DuckDB's allocator, glibc's large mmapped chunks)."""
    out: collections.Counter = collections.Counter()
    key = None
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and not parts[0].endswith(":"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                name = parts[5] if len(parts) > 5 else ""
                if name == "[heap]":
                    key = "glibc main heap"
                elif name:
                    key = None
                elif lo % (64 << 20) == 0 and hi - lo <= 64 << 20:
                    key = "glibc thread arenas"
                elif hi - lo >= 1 << 30:
                    key = "mimalloc (Arrow)"
                else:
                    key = "other anonymous"
            elif parts[0] == "Rss:" and key is not None:
                out[key] += int(parts[1]) / 1024
    return out


def python_arenas_mb() -> float:
    """MB of Python's small-object arenas now mapped (sys._debugmallocstats' "arenas allocated current"
    times the arena size; it writes to the C stderr, read back through a temporary file)."""
    with tempfile.TemporaryFile("w+") as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read()
    current = re.search(r"# arenas allocated current\s*=\s*([\d,]+)", text)
    size = re.search(r"(\d+) arenas \* (\d+) bytes/arena", text)
    if not current:
        return float("nan")
    arena = int(size.group(2)) if size else 1 << 20
    return int(current.group(1).replace(",", "")) * arena / 1e6


def per_1000(points: list[tuple[int, float]]) -> float:
    n = len(points)
    if n < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den * 1000 if den else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1500)
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--skip", type=int, default=500, help="runs left out of the slopes (the block cache fills)")
    ap.add_argument("--mode", choices=("dagster", "local"), default="dagster")
    ap.add_argument("--state-store", choices=("rocksdb", "memory"), default="rocksdb")
    a = ap.parse_args()
    qargs = argparse.Namespace(source="files", sink="parquet", state_store=a.state_store, query="window",
                               keys=5000, rate=200, files_per_second=1)
    work = tempfile.mkdtemp(prefix="runs-memory-")
    os.makedirs(os.path.join(work, "in"))
    rnd = random.Random(28)

    def feed(i: int) -> None:
        with open(os.path.join(work, "in", f"{i:08d}.json"), "w") as f:
            f.write("\n".join(soak.lines(200, qargs.keys, rnd)) + "\n")

    def query():
        return soak.build(qargs, work, None, None).option("state_partitions", 2)

    if a.mode == "local":
        def run(i: int) -> None:
            feed(i)
            q = query().trigger(available_now=True).start(os.path.join(work, "out"))
            q.await_termination()
    else:
        import dagster as dg

        from orchestration import build_definitions
        from orchestration import dagster_internals as di
        logging.disable(logging.INFO)

        def factory():
            return query().trigger(processing_time="1 second")
        factory.__name__ = "soak"
        defs = build_definitions([(factory, {"path": os.path.join(work, "out"), "sensor_status": "stopped",
                                             "fanout": True})], asset_root=work)
        job = defs.get_job_def("soak_batch")
        inst = dg.DagsterInstance.ephemeral()

        def run(i: int) -> None:
            feed(i)
            res = job.execute_in_process(instance=inst, raise_on_error=True)
            di.delete_check_executions(inst, [res.run_id])
            inst.delete_run(res.run_id)

    from state import working
    t0, load0 = time.monotonic(), os.getloadavg()
    rows: list[dict] = []
    maps: dict[int, collections.Counter] = {}
    try:
        for i in range(a.runs + 1):
            run(i)
            if i % a.every:
                continue
            gc.collect()
            r = {"run": i, "rss": rss_after_trim(), **soak.glibc_mb(), "objects": len(gc.get_objects()) / 1e3,
                 "blocks": sys.getallocatedblocks() / 1e3, "py_arenas": python_arenas_mb(),
                 "cache": working._shared["cache"].get_usage() / 1e6 if working._shared else 0.0,
                 "s": time.monotonic() - t0}
            rows.append(r)
            if i >= a.skip:
                maps[i] = anon_mappings()
            print(f"run {i:6d}  rss {r['rss']:7.1f} MB  glibc in use {r['in_use']:6.1f} free {r['free']:6.1f} "
                  f"heaps {r['heaps']:6.1f}  block cache {r['cache']:5.1f}  gc objects {r['objects']:6.1f}k  "
                  f"py blocks {r['blocks']:7.1f}k in arenas {r['py_arenas']:5.1f} MB  {r['s']:6.0f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    late = [r for r in rows if r["run"] >= a.skip]
    load1 = os.getloadavg()
    print(f"\n{a.mode}, {a.state_store} store, runs {a.skip}..{a.runs} (load {load0[0]:.1f} -> {load1[0]:.1f}); "
          "per 1,000 runs:")
    for k in ("rss", "in_use", "free", "heaps", "cache", "py_arenas", "objects", "blocks"):
        unit = "k" if k in ("objects", "blocks") else " MB"
        print(f"  {k:8s} {per_1000([(r['run'], r[k]) for r in late]):+8.2f}{unit}  "
              f"({late[0][k]:.1f} -> {late[-1][k]:.1f})" if late else "")
    if len(maps) >= 2:
        first, last = maps[min(maps)], maps[max(maps)]
        grew = sorted(((last[k] - first[k], k) for k in set(first) | set(last)), reverse=True)
        print(f"resident anonymous memory by owner, run {min(maps)} -> {max(maps)}: "
              + ", ".join(f"{k} {first[k]:.1f} -> {last[k]:.1f} MB ({d:+.1f})" for d, k in grew))


if __name__ == "__main__":
    main()

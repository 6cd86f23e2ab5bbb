"""Commit latency of the state store per batch, small vs large state.

For each provider configuration (memory; rocksdb with changelog checkpointing on; rocksdb
with it off = a full snapshot uploaded every version) and each state size (--small, default
100k keys; --large, default 10M keys, or env STATE_BENCH_LARGE), the state is loaded, then
--batches batches each update keys chosen at random and commit; the commit is timed.

Two workloads per size:
  pct   : 1% of the state's keys change per batch (1k at 100k, 100k at 10M)
  fixed : the same number of keys change at both sizes (1% of --small)
The figure of merit is the ratio large/small of the median commit time: with changelog
checkpointing the fixed-workload ratio stays near 1 (a commit costs what the batch changed),
without it the ratio follows the state size.  Snapshot uploads every --snapshot-interval
versions show up in the max column.

usage: python bench/state_commit.py [--small N] [--large N] [--batches N] [--configs ...]
The 10M run loads 10M keys per configuration and takes tens of minutes; use --large 1000000.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from state import make_provider  # noqa: E402
from state.encoding import encode_key  # noqa: E402

CONFIGS = {"memory": ("memory", True), "rocksdb-changelog": ("rocksdb", True),
           "rocksdb-snapshot": ("rocksdb", False)}
LOAD_CHUNK = 1_000_000


def run(config: str, keys: int, changes: dict[str, int], batches: int, interval: int,
        base: str) -> dict[str, list[float]]:
    name, changelog = CONFIGS[config]
    root = tempfile.mkdtemp(prefix=f"{config}-{keys}-", dir=base)
    conf = {"changelog_checkpointing": changelog, "snapshot_interval": interval}
    if name == "rocksdb":
        conf["local_dir"] = os.path.join(root, "local")
    provider = make_provider(name, os.path.join(root, "ckpt"), **conf)
    store = provider.open("bench", 0, -1)
    version = -1
    t0 = time.perf_counter()
    for start in range(0, keys, LOAD_CHUNK):
        for i in range(start, min(keys, start + LOAD_CHUNK)):
            store.put(encode_key((i,)), b"v%015d" % i)
        version += 1
        store.commit(version)
    print(f"  loaded {keys:,} keys into {config} in {time.perf_counter() - t0:.1f}s",
          file=sys.stderr, flush=True)
    rng = random.Random(42)
    out: dict[str, list[float]] = {}
    for workload, n in changes.items():
        times = []
        for b in range(batches):
            for i in rng.sample(range(keys), n):
                store.put(encode_key((i,)), b"u%015d" % (i + b))
            version += 1
            t = time.perf_counter()
            store.commit(version)
            times.append(time.perf_counter() - t)
        out[workload] = times
    store.close()
    provider.close()
    shutil.rmtree(root, ignore_errors=True)
    return out


def fmt(times: list[float]) -> str:
    q = sorted(times)
    return (f"median {statistics.median(q) * 1e3:9.2f} ms  p90 {q[int(0.9 * (len(q) - 1))] * 1e3:9.2f} ms"
            f"  max {q[-1] * 1e3:9.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--small", type=int, default=100_000)
    ap.add_argument("--large", type=int, default=int(os.environ.get("STATE_BENCH_LARGE", 10_000_000)))
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--snapshot-interval", type=int, default=10)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--dir", default=None, help="scratch directory (default: system temp)")
    args = ap.parse_args()
    fixed = max(1, args.small // 100)
    results: dict[tuple[str, int], dict[str, list[float]]] = {}
    for config in args.configs.split(","):
        for keys in (args.small, args.large):
            changes = {"pct": max(1, keys // 100), "fixed": fixed}
            results[(config, keys)] = r = run(config, keys, changes, args.batches,
                                              args.snapshot_interval, args.dir)
            for workload, times in r.items():
                print(f"{config:18s} {keys:>11,} keys  {workload:5s} {changes[workload]:>8,} changed/batch"
                      f"  {fmt(times)}", flush=True)
    print(f"\nratio of median commit time, {args.large:,} keys / {args.small:,} keys "
          f"(state size ratio {args.large / args.small:.0f}x):")
    for config in args.configs.split(","):
        small, large = results[(config, args.small)], results[(config, args.large)]
        ratios = {w: statistics.median(large[w]) / statistics.median(small[w]) for w in small}
        print(f"  {config:18s} fixed {fixed:,} changed: {ratios['fixed']:7.2f}x   "
              f"1% changed: {ratios['pct']:7.2f}x")


if __name__ == "__main__":
    main()

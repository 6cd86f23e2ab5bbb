"""Memory of a RocksDB state provider opened anew for every batch, as a Dagster run does (issue 28
item 10): no Dagster, no query, only the state's per-run lifecycle.

    .venv/bin/python bench/state_reopen.py [--runs 1500] [--partitions 2]

Each "run" makes a new provider on one local checkpoint, opens every partition at version v-1,
reads and writes 100 random keys of 5,000 and deletes 30, commits version v and closes. Every 100
runs it prints the resident memory, the anonymous part, and the usage of the process's shared
RocksDB block cache (state/working.py, BLOCK_CACHE_BYTES): the cache fills with the blocks of the
files each reopen reads (RocksDB flushes the recovered memtable into a new file on open), up to its
capacity; the rest should stay flat.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from state import make_provider, working  # noqa: E402
from state.encoding import encode_key  # noqa: E402


def status(field: str, path: str = "/proc/self/status") -> float:
    with open(path) as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1500)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    ckpt = tempfile.mkdtemp(prefix="state-reopen-")
    rnd = random.Random(28)
    t0 = time.monotonic()
    print(f"{'runs':>6} {'rss MB':>7} {'anon':>7} {'cache':>6} {'anon-cache':>10} {'s':>5}")
    try:
        for v in range(args.runs):
            with make_provider("rocksdb", ckpt) as p:
                for part in range(args.partitions):
                    s = p.open("agg", part, v - 1)
                    for _ in range(100):
                        k = encode_key([f"k{rnd.randrange(5000)}"])
                        s.get(k)
                        s.put(k, b"x" * 60)
                    for _ in range(30):
                        s.delete(encode_key([f"k{rnd.randrange(5000)}"]))
                    s.commit(v)
                    s.close()
            if (v + 1) % 100 == 0:
                cache = working._shared["cache"].get_usage() / 1e6 if working._shared else 0.0
                anon = status("Anonymous:", "/proc/self/smaps_rollup")
                print(f"{v + 1:6d} {status('VmRSS:'):7.1f} {anon:7.1f} {cache:6.1f} {anon - cache:10.1f} "
                      f"{time.monotonic() - t0:5.0f}", flush=True)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; block cache capacity "
          f"{working.BLOCK_CACHE_BYTES / 1e6:.1f} MB")


if __name__ == "__main__":
    main()

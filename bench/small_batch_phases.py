"""Where a small_batches.py run's wall goes, by phase of the run (issue 33 item 1).

    .venv/bin/python bench/small_batch_phases.py [RUNS] [STORES]      # 8 memory,rocksdb

Runs small_batches.py's own `run_query` (files source: 40 files x 50 clicks, one per batch; 41
batches a run) RUNS times per store after one warm-up run of each, the stores alternating in this
process, and prints per store the medians over runs of: start() to the first plan, batch 0 (its
plan to the next plan: with RocksDB, the working copies' opens), the median of the other batches,
the batches that commit a snapshot version (10, 20, 30, 40: RocksDB writes their rows snapshots
in the background), the tail (the last plan to the end of await_termination: the last snapshot
job and the stores' close), the whole run, and the process CPU of the run. Wall times: read them
beside the load average printed at the end, and compare builds with bench/ab.py.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import small_batches as sb  # noqa: E402  (puts its tree first on sys.path)

from increments.execution import steps  # noqa: E402


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    stores = (sys.argv[2] if len(sys.argv) > 2 else "memory,rocksdb").split(",")
    path = sb.generate(tempfile.gettempdir(), 40, 50)
    plans: list[float] = []
    plan = steps.plan_batch

    def timed_plan(*a, **kw):
        plans.append(time.perf_counter())
        return plan(*a, **kw)
    steps.plan_batch = timed_plan
    rows: dict[str, list[tuple]] = {s: [] for s in stores}
    for i in range(runs + 1):
        for store in stores:
            plans.clear()
            c0, t0 = time.process_time(), time.perf_counter()
            secs, _ = sb.run_query("files", store, path, None, 50)
            cpu = time.process_time() - c0
            if i == 0:
                continue                          # warm-up
            d = [b - a for a, b in zip(plans, plans[1:])]
            snaps = [d[v] for v in (10, 20, 30, 40) if v < len(d)]
            rest = [x for v, x in enumerate(d) if v and v % 10]
            rows[store].append((plans[0] - t0, d[0], statistics.median(rest), statistics.mean(snaps),
                                t0 + secs - plans[-1], secs, cpu))
    for store, r in rows.items():
        m = [statistics.median(c) * 1000 for c in zip(*r)]
        print(f"{store:8s} to plan 0 {m[0]:6.2f} ms | batch 0 {m[1]:6.2f} ms | other batches {m[2]:6.2f} ms | "
              f"snapshot batches {m[3]:6.2f} ms | tail {m[4]:6.2f} ms | run {m[5]:7.2f} ms | cpu {m[6]:7.2f} ms")
    print("load %.1f/%.1f/%.1f" % os.getloadavg())


if __name__ == "__main__":
    main()

"""Adaptive batch sizing against every fixed setting, draining the same backlog, in this run.

    .venv/bin/python bench/adaptive_batches.py [--files 960] [--rows 5000] [--rounds 2]

Workload: a backlog of --files JSON files (--rows click events each, time moving forward file by
file); the query of the README (watermark 15 minutes, 1-hour tumbling count per campaign, append),
trigger(available_now=True), a memory sink, the local runner. Each fixed max_files_per_trigger in
FIXED and max_files_per_trigger="auto" (with the default target_batch_duration, no tuning) drain
the backlog from a fresh checkpoint; the best of --rounds wall times of each is kept (rounds
alternate the settings, so machine noise hits all of them alike). Printed: each setting's time and
batch count, and the ratio auto / best fixed (the target: <= 1.2).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402

SCHEMA = "campaign_id STRING, user_id STRING, event_time TIMESTAMP"
FIXED = [4, 16, 64, 256, None]        # None: no limit (the whole backlog in one batch)


def generate(root: str, files: int, rows: int, seed: int = 7) -> str:
    rnd = random.Random(seed)
    os.makedirs(root)
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc).timestamp()
    for f in range(files):
        base = t0 + f * 300
        with open(os.path.join(root, f"clicks-{f:05d}.json"), "w") as fh:
            for _ in range(rows):
                t = dt.datetime.fromtimestamp(base + rnd.uniform(-120, 300), dt.timezone.utc)
                fh.write(json.dumps({"campaign_id": f"c{rnd.randrange(40)}", "user_id": f"u{rnd.randrange(9999)}",
                                     "event_time": t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}) + "\n")
    return root


def drain(src: str, limit, work: str) -> tuple[float, int, int]:
    """(wall seconds, batches, output rows) of one drain of the backlog from a fresh checkpoint."""
    name = f"adaptive_{time.time_ns()}"
    chk = os.path.join(work, name)
    q = (inc.read_stream.files(src, "json", SCHEMA, max_files_per_trigger=limit)
         .with_watermark("event_time", "15 minutes").group_by(F.window("event_time", "1 hour"), "campaign_id").count()
         .write_stream.format("memory").query_name(name).output_mode("append").checkpoint_location(chk)
         .trigger(available_now=True))
    t0 = time.perf_counter()
    query = q.start()
    query.await_termination()
    wall = time.perf_counter() - t0
    out = sum(t.num_rows for t in inc.memory_batches(name).values())
    batches = query.last_progress["batch_id"] + 1
    shutil.rmtree(chk, ignore_errors=True)
    return wall, batches, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=960)
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="adaptive_bench_")
    try:
        src = generate(os.path.join(work, "in"), a.files, a.rows)
        settings = FIXED + ["auto"]
        drain(src, 16, work)                                   # warm-up: imports, page cache
        best: dict = {}
        outputs = set()
        for _ in range(a.rounds):
            for s in settings:
                wall, batches, out = drain(src, s, work)
                outputs.add(out)
                if s not in best or wall < best[s][0]:
                    best[s] = (wall, batches)
        assert len(outputs) == 1, f"settings disagree on the output: {outputs}"
        print(f"backlog: {a.files} files x {a.rows} rows = {a.files * a.rows:,} events; "
              f"best of {a.rounds} rounds per setting; {outputs.pop()} windows out")
        for s in settings:
            label = "auto (target_batch_duration default 30 s)" if s == "auto" else (
                f"max_files_per_trigger={s}" if s else "no limit (one batch)")
            print(f"  {label:45s} {best[s][0]:7.2f} s  {best[s][1]:4d} batches")
        fixed_best = min(FIXED, key=lambda s: best[s][0])
        ratio = best["auto"][0] / best[fixed_best][0]
        print(f"auto / best fixed ({fixed_best or 'no limit'}): {ratio:.2f}x  (target <= 1.2: "
              f"{'met' if ratio <= 1.2 else 'not met'})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

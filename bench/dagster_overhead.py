"""The orchestration floor: a batch run's wall time beside an empty one-op job's run, both launched
over GraphQL on the same real Dagster instance (daemon + webserver, PostgreSQL storage, run queue).

    .venv/bin/python bench/dagster_overhead.py [--runs 5] [--drain-files 10]

Wall time of a run = its end time - its creation time (queue + launch + process start + steps).
Prints both medians and their ratio (target: below 1.3). Each batch run reads one new JSON file of
1,000 rows and writes it to a parquet sink.

Then the drain cadence: an AvailableNow drain of --drain-files files, one file per batch, started
by a launch of its drain job; its sensor requests the first batch, each commit queues the next
(orchestration/chain.py). Cadence = (end of the last batch run - end of the first) / (batches - 1).
Printed beside the empty-run floor, the isolated batch run's wall time (above) and the drain runs'
own start -> end times; goal: cadence <= 1.5x the median wall time of a batch run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

PG = os.environ.get("INCREMENTS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def write_file(root: str, i: int, rows: int = 1000, landing: str = "landing") -> None:
    d = os.path.join(root, landing)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f-{i:04d}.json"), "w") as f:
        for r in range(rows):
            f.write(json.dumps({"id": i * rows + r, "name": f"n{r}"}) + "\n")


def main() -> int:
    import sqlalchemy as sa
    from orchestration.home import prepare_home
    from orchestration.local_instance import LocalDagster
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--drain-files", type=int, default=10)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="inc-bench-dagster-")
    db = "inc_bench_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(PG, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{db}"'))
    url = PG.rsplit("/", 1)[0].replace("+psycopg", "+psycopg2") + "/" + db
    env = prepare_home(os.path.join(root, "home"), pg_url=url)
    env.update(INCREMENTS_BENCH_DIR=root, PYTHONPATH=REPO)
    ws = os.path.join(root, "workspace.yaml")
    with open(ws, "w") as f:
        f.write(f"load_from:\n  - python_file:\n      relative_path: {os.path.join(HERE, 'dagster_bench_location.py')}\n"
                f"      attribute: defs\n      working_directory: {REPO}\n      location_name: bench\n")
    batch, empty, batch_exec, empty_exec = [], [], [], []
    d = LocalDagster(env["DAGSTER_HOME"], ws, env=env, cwd=REPO)
    try:
        d.start(180)
        for i in range(args.runs + 1):          # the first pair warms up
            write_file(root, i)
            b = d.wait_run(d.launch("bench_copy_batch"), 180)
            e = d.wait_run(d.launch("empty_job"), 180)
            assert b["status"] == "SUCCESS" and b["tags"].get("increments/outcome") == "committed", b
            assert e["status"] == "SUCCESS", e
            if i:
                batch.append(b["endTime"] - b["creationTime"])
                empty.append(e["endTime"] - e["creationTime"])
                batch_exec.append(b["endTime"] - b["startTime"])
                empty_exec.append(e["endTime"] - e["startTime"])
        drain_runs = drain(d, root, args.drain_files)
    finally:
        d.stop()
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    mb, me = statistics.median(batch), statistics.median(empty)
    print(f"batch run (plan/read/process/write/commit, 1,000 rows): median {mb:.2f} s  runs {[round(x, 2) for x in batch]}")
    print(f"empty one-op job run (orchestration floor):             median {me:.2f} s  runs {[round(x, 2) for x in empty]}")
    print(f"ratio batch / empty: {mb / me:.2f}  (target < 1.3)")
    xb, xe = statistics.median(batch_exec), statistics.median(empty_exec)
    print(f"started -> ended only (no queue wait): batch {xb:.2f} s, empty {xe:.2f} s, ratio {xb / xe:.2f}")
    ends = [r["endTime"] for r in drain_runs]
    cadence = (ends[-1] - ends[0]) / (len(ends) - 1)
    own = statistics.median(r["endTime"] - r["startTime"] for r in drain_runs)
    chained = sum(1 for r in drain_runs if r["tags"].get("increments/after_run"))
    print(f"AvailableNow drain, {len(drain_runs)} batches ({chained} queued by the previous commit): "
          f"{cadence:.2f} s per batch; its runs: median start -> end {own:.2f} s")
    print(f"drain cadence / empty-run floor {cadence / me:.2f}; / batch run wall {cadence / mb:.2f} (goal <= 1.5); "
          f"/ drain runs' start -> end {cadence / own:.2f}")
    return 0


def drain(d, root: str, files: int) -> list[dict]:
    """Run an AvailableNow drain of `files` files; its batch runs, oldest first."""
    import time
    for i in range(files):
        write_file(root, i, landing="drain_landing")
    d.wait_run(d.launch("bench_drain_available_now"), 180)
    deadline = time.monotonic() + 60 + 20 * files
    while True:
        runs = [r for r in d.runs({"increments/query": "bench_drain"}) if r["jobName"] == "bench_drain_batch"]
        done = [r for r in runs if r["status"] == "SUCCESS" and r["tags"].get("increments/outcome") == "committed"]
        if len(done) >= files:
            return sorted(done, key=lambda r: int(r["tags"]["increments/batch_id"]))
        if any(r["status"] == "FAILURE" for r in runs) or time.monotonic() > deadline:
            raise RuntimeError(f"drain did not finish: {[(r['status'], r['tags'].get('increments/outcome')) for r in runs]}")
        time.sleep(1)


if __name__ == "__main__":
    raise SystemExit(main())

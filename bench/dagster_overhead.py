"""Where a launched batch run's time goes, on one real Dagster instance (daemon + webserver,
PostgreSQL storage, run queue), all figures from one run of this script:

    .venv/bin/python bench/dagster_overhead.py [--runs 5] [--drain-files 10] [--imports 5]

1. Code location load: fresh interpreters importing the bench's code location
   (bench/dagster_bench_location.py, what every run of it imports before its first op) and the
   example queries' (orchestration.definitions) beside `import dagster` alone, alternating; wall
   and CPU medians. Goal: load <= 1.3x `import dagster`. Modules are byte-compiled first (as
   `pip install` does in the image), so no run pays for compiling them.
2. A batch run (reads one new JSON file of 1,000 rows, writes a parquet sink) beside an empty
   one-op job and an empty five-op job (the batch graph's shape, values passed between ops, no
   work: what Dagster alone costs for five ops), launched alternately over GraphQL. Wall time =
   end - creation (queue + launch + process start + code load + steps). Goal: batch <= 1.2x the
   one-op run; batch / five-op is what is ours. Each run is split by its event
   log: queue (created -> RUN_STARTING), worker start (-> "Started process for run": a new
   process importing dagster), code load (-> RUN_START: the code location and the plan), steps
   (-> last step event), end (-> run end); plus the events it wrote (by type) and their cost at
   the per-event write time measured on the same storage.
3. Drain cadence: an AvailableNow drain of --drain-files files, one file per batch (a backfill:
   the start run queues the first batch, each commit the next: orchestration/chain.py). Cadence =
   (end of the last batch run - end of the first) / (batches - 1), beside the drain runs' own
   start -> end. Goal: cadence <= 1.2x the runs' own duration. The floor between two runs is
   Dagster's: the queue's dequeue, a new run worker process, the code location load (the one-op
   run's creation -> RUN_START, printed beside).
--mode selects how runs launch (MODES: "default" = the shipped dagster.yaml, DefaultRunLauncher);
another mode adds its instance settings and processes (e.g. Celery workers) through the same hook.
Prints the ratios; the goals are not asserted (see bench/README.md for figures and limits).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

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


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def import_costs(env: dict[str, str], rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Fresh interpreters, alternating: nothing, `import dagster`, the bench's code location, the
    example queries' code location."""
    py = sys.executable
    cmds = {"python (nothing)": [py, "-c", "pass"],
            "import dagster": [py, "-c", "import dagster"],
            "bench code location": [py, "-c", "import runpy; runpy.run_path('bench/dagster_bench_location.py')"],
            "orchestration.definitions (examples)": [py, "-c", "import orchestration.definitions"]}
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    for i in range(rounds + 1):
        for k, c in cmds.items():
            r = timed(c, env)
            if i:                            # the first round warms the page cache
                out[k].append(r)
    return out


PHASES = ("queue", "worker start", "code load", "steps", "end")


def phases(instance, run_id: str) -> tuple[dict[str, float], dict[str, int]]:
    """A run's phases (see the module doc) from its event log, and its events by type."""
    rec = instance.get_run_record_by_id(run_id)
    logs = instance.all_logs(run_id)
    def first(pred):
        return next((e.timestamp for e in logs if pred(e)), None)
    def kind(e):         # the stored names are still the PIPELINE_* ones for run events
        return e.dagster_event.event_type_value.replace("PIPELINE_", "RUN_") if e.dagster_event else None
    starting = first(lambda e: kind(e) == "RUN_STARTING")
    worker = first(lambda e: "Started process for run" in (e.message or "")
                   or "Started process for run" in str(getattr(e.dagster_event, "message", "") or ""))
    start = first(lambda e: kind(e) == "RUN_START")
    steps = [e.timestamp for e in logs if e.step_key]
    end = rec.end_time or logs[-1].timestamp
    created = rec.create_timestamp.timestamp()
    last_step = steps[-1] if steps else start
    marks = [created, starting, worker, start, last_step, end]
    out = {name: (b - a) for name, a, b in zip(PHASES, marks, marks[1:]) if a is not None and b is not None}
    kinds: dict[str, int] = {}
    for e in logs:
        k = kind(e) or "log message"
        kinds[k] = kinds.get(k, 0) + 1
    return out, kinds


def op_seconds(instance, run_id: str) -> dict[str, float]:
    """Each op's STEP_START -> STEP_SUCCESS (or failure) in seconds, by op name (the step key's last part)."""
    starts, out = {}, {}
    for e in instance.all_logs(run_id):
        if not e.step_key or not e.dagster_event:
            continue
        kind = e.dagster_event.event_type_value
        name = e.step_key.split(".")[-1]
        if kind == "STEP_START":
            starts[name] = e.timestamp
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE") and name in starts:
            out[name] = e.timestamp - starts[name]
    return out


def print_op_seconds(label: str, per_run: list[dict[str, float]]) -> None:
    names = [n for n in ("plan", "read", "process", "write", "commit") if any(n in r for r in per_run)]
    print(f"   {label}: " + ", ".join(f"{n} {_med([r[n] for r in per_run if n in r]):.2f} s" for n in names))


def event_write_cost(instance, n: int = 40) -> float:
    """Seconds per event written to this instance's event log (an engine event on a scratch run)."""
    import dagster as dg
    run = instance.create_run_for_job(dg.GraphDefinition("bench_scratch", node_defs=[]).to_job())
    t0 = time.perf_counter()
    for i in range(n):
        instance.report_engine_event(f"bench event {i}", run)
    dt = (time.perf_counter() - t0) / n
    instance.delete_run(run.run_id)
    return dt


def launched(d, instance, job: str, lost: list[str], attempts: int = 3) -> dict:
    """Launch `job` and wait for it; a run that fails before its worker started (the launch itself:
    e.g. the code server's gRPC call timing out on an overloaded machine) is recorded in `lost`
    and launched again."""
    for _ in range(attempts):
        r = d.wait_run(d.launch(job), 300)
        logs = instance.all_logs(r["runId"])
        if r["status"] == "FAILURE" and not any("Started process for run" in (x.message or "") for x in logs):
            lost.append(f"{job}: " + " | ".join(str(x.message)[:120] for x in logs[-3:] if x.message))
            continue
        return r
    return r


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def report(imports, times, split, lost, per_event) -> None:
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("1. code location load (fresh interpreters, medians of wall and CPU seconds)")
    ref_w, ref_c = _med([w for w, _ in imports["import dagster"]]), _med([c for _, c in imports["import dagster"]])
    for k, xs in imports.items():
        w, c = _med([x for x, _ in xs]), _med([y for _, y in xs])
        print(f"   {k:38s} wall {w:5.2f} s  CPU {c:5.2f} s   / import dagster: wall {w / ref_w:.2f}  CPU {c / ref_c:.2f}")
    print("   goal: code location <= 1.3x import dagster")
    m = {k: _med([t for t, _ in v]) for k, v in times.items()}
    x = {k: _med([t for _, t in v]) for k, v in times.items()}
    print("2. runs, creation -> end (medians): batch (plan/read/process/write/commit, 1,000 rows), an empty "
          "one-op run, an empty five-op run")
    for k in RUN_KINDS:
        print(f"   {k:6s} median {m[k]:.2f} s  runs {[round(t, 2) for t, _ in times[k]]}")
    print(f"   batch / empty: {m['batch'] / m['empty']:.2f}  (goal <= 1.2); Dagster's five ops / one op: "
          f"{m['empty5'] / m['empty']:.2f}; batch / empty five-op (ours): {m['batch'] / m['empty5']:.2f}")
    print(f"   started -> ended only (no queue wait): batch {x['batch']:.2f} s, empty {x['empty']:.2f} s, "
          f"empty5 {x['empty5']:.2f} s")
    print(f"   where the time goes (medians, s; one event written: {per_event * 1000:.1f} ms):")
    print("   " + " " * 7 + "".join(f"{p:>14s}" for p in PHASES) + "   events  est. event writes")
    for kind in RUN_KINDS:
        ph = [p for p, _ in split[kind]]
        n_events = _med([sum(k.values()) for _, k in split[kind]])
        print(f"   {kind:6s} " + "".join(f"{_med([p[x] for p in ph if x in p]):14.2f}" for x in PHASES)
              + f"   {n_events:6.0f}  {n_events * per_event:6.2f} s")
    if lost:
        print(f"   runs lost at launch and launched again: {len(lost)}: {lost}")
    kinds = split["batch"][-1][1]
    print("   events of the last batch run by type: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))


RUN_KINDS = ("batch", "empty", "empty5")
JOBS = {"batch": "bench_copy_batch", "empty": "empty_job", "empty5": "empty5_job"}


def mode_default(root: str, env: dict[str, str]) -> tuple[str, Any, Any]:
    """(dagster.yaml text to append, start(), stop()) of a launch mode; default: nothing more."""
    return "", (lambda: None), (lambda: None)


MODES: dict[str, Any] = {"default": mode_default}


def main() -> int:
    import sqlalchemy as sa
    from orchestration.home import prepare_home
    from orchestration.local_instance import LocalDagster
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--drain-files", type=int, default=10)
    ap.add_argument("--imports", type=int, default=5)
    ap.add_argument("--mode", choices=sorted(MODES), default="default")
    args = ap.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "increments", "state", "orchestration", "examples",
                    "bench"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    root = tempfile.mkdtemp(prefix="inc-bench-dagster-")
    db = "inc_bench_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(PG, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{db}"'))
    url = PG.rsplit("/", 1)[0].replace("+psycopg", "+psycopg2") + "/" + db
    env = prepare_home(os.path.join(root, "home"), pg_url=url)
    env.update(INCREMENTS_BENCH_DIR=root, PYTHONPATH=REPO, INCREMENTS_EXAMPLES_DIR=os.path.join(root, "examples"))
    extra_yaml, start_mode, stop_mode = MODES[args.mode](root, env)
    if extra_yaml:
        with open(os.path.join(env["DAGSTER_HOME"], "dagster.yaml"), "a") as f:
            f.write("\n" + extra_yaml)
    run_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run_env.update(env)
    imports = import_costs(run_env, args.imports)
    ws = os.path.join(root, "workspace.yaml")
    with open(ws, "w") as f:
        f.write(f"load_from:\n  - python_file:\n      relative_path: {os.path.join(HERE, 'dagster_bench_location.py')}\n"
                f"      attribute: defs\n      working_directory: {REPO}\n      location_name: bench\n")
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in RUN_KINDS}
    split: dict[str, list] = {k: [] for k in RUN_KINDS}
    lost: list[str] = []
    batch_ids: list[str] = []
    drain_ops: list[dict[str, float]] = []
    os.environ.update(env)
    import dagster as dg
    instance = dg.DagsterInstance.from_config(env["DAGSTER_HOME"])
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)       # the runs read the byte-compiled modules
    d = LocalDagster(env["DAGSTER_HOME"], ws, env=env, cwd=REPO)
    try:
        d.start(180)
        start_mode()
        for i in range(args.runs + 1):          # the first round warms up
            write_file(root, i)
            for kind in RUN_KINDS:
                r = launched(d, instance, JOBS[kind], lost)
                if r["status"] != "SUCCESS" or (kind == "batch" and r["tags"].get("increments/outcome") != "committed"):
                    raise RuntimeError(f"run {r['runId']} {r['status']} {r['tags']}: "
                                       + " | ".join(str(x.message)[:300] for x in instance.all_logs(r["runId"])[-6:]))
                if i:
                    if kind == "batch":
                        batch_ids.append(r["runId"])
                    times[kind].append((r["endTime"] - r["creationTime"], r["endTime"] - r["startTime"]))
                    split[kind].append(phases(instance, r["runId"]))
        per_event = event_write_cost(instance)
        report(imports, times, split, lost, per_event)
        batch_ops = [op_seconds(instance, r) for r in batch_ids]
        print_op_seconds("the batch runs' ops (medians)", batch_ops)
        drain_runs, backfill = drain(d, root, args.drain_files)
        drain_ops = [op_seconds(instance, r["runId"]) for r in drain_runs]
    finally:
        stop_mode()
        d.stop()
        instance.dispose()
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))

    if len(drain_runs) < 2:
        print(f"3. AvailableNow drain: only {len(drain_runs)} batch run(s) committed in time; no cadence")
        return 0
    ends = [r["endTime"] for r in drain_runs]
    cadence = (ends[-1] - ends[0]) / (len(ends) - 1)
    own = statistics.median(r["endTime"] - r["startTime"] for r in drain_runs)
    chained = sum(1 for r in drain_runs if r["tags"].get("increments/after_run"))
    gap = statistics.median(b["startTime"] - a["endTime"] for a, b in zip(drain_runs, drain_runs[1:]))
    floor = _med([p["queue"] + p["worker start"] + p["code load"] for p, _ in split["empty"]
                  if all(k in p for k in ("queue", "worker start", "code load"))])
    print(f"3. AvailableNow drain, {len(drain_runs)} batches (backfill {backfill}; {chained} queued by the run before): "
          f"{cadence:.2f} s per batch; its runs: median start -> end {own:.2f} s")
    print(f"   cadence / drain runs' own start -> end {cadence / own:.2f} (goal <= 1.2); between two runs (end -> "
          f"next start) {gap:.2f} s; Dagster's floor for it, an empty run's creation -> RUN_START: {floor:.2f} s")
    print_op_seconds("the drain runs' ops (medians)", drain_ops)
    return 0


def drain(d, root: str, files: int) -> tuple[list[dict], str | None]:
    """Run an AvailableNow drain of `files` files; its batch runs, oldest first, and its backfill id."""
    for i in range(files):
        write_file(root, i, landing="drain_landing")
    start = d.wait_run(d.launch("bench_drain_available_now"), 180)
    backfill = start["tags"].get("dagster/backfill")
    deadline = time.monotonic() + 120 + 90 * files        # generous: shared machines run far slower than idle
    while True:
        runs = [r for r in d.runs({"increments/query": "bench_drain"}) if r["jobName"] == "bench_drain_batch"]
        done = [r for r in runs if r["status"] == "SUCCESS" and r["tags"].get("increments/outcome") == "committed"]
        if len(done) >= files:
            return sorted(done, key=lambda r: int(r["tags"]["increments/batch_id"])), backfill
        if time.monotonic() > deadline:
            print(f"   (drain stopped waiting: {[(r['status'], r['tags'].get('increments/outcome')) for r in runs]})")
            return sorted(done, key=lambda r: int(r["tags"]["increments/batch_id"])), backfill
        # a run failed at launch (no outcome: e.g. the code server's gRPC call timed out on an
        # overloaded machine) is retried by the instance's run retries; a batch that failed is fatal
        if any(r["status"] == "FAILURE" and r["tags"].get("increments/outcome") for r in runs):
            raise RuntimeError(f"drain did not finish: {[(r['status'], r['tags'].get('increments/outcome')) for r in runs]}")
        time.sleep(1)


if __name__ == "__main__":
    raise SystemExit(main())

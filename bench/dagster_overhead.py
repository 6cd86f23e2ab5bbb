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
   work: what Dagster alone costs for five ops; from a second code location loading the same
   definitions with the engine preload off, bench/dagster_bench_floor.py), launched alternately
   over GraphQL. Wall time =
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


def launched(d, instance, job: str, lost: list[str], attempts: int = 3, tags: dict | None = None) -> dict:
    """Launch `job` and wait for it; a run that fails before its worker started (the launch itself:
    e.g. the code server's gRPC call timing out on an overloaded machine) is recorded in `lost`
    and launched again."""
    for _ in range(attempts):
        r = d.wait_run(d.launch(job, tags=tags), 300)
        logs = instance.all_logs(r["runId"])
        if r["status"] == "FAILURE" and not any("Started process for run" in (x.message or "") for x in logs):
            lost.append(f"{job}: " + " | ".join(str(x.message)[:120] for x in logs[-3:] if x.message))
            continue
        return r
    return r


def scratch(prefix: str):
    """Byte-compile the modules (as pip does in the image), a scratch directory and a scratch
    PostgreSQL database: (root, db name, admin engine, the database's URL for Dagster)."""
    import sqlalchemy as sa
    subprocess.run([sys.executable, "-m", "compileall", "-q", "increments", "state", "orchestration", "examples",
                    "bench"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    root = tempfile.mkdtemp(prefix=prefix)
    db = "inc_bench_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(PG, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{db}"'))
    return root, db, admin, PG.rsplit("/", 1)[0].replace("+psycopg", "+psycopg2") + "/" + db


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
#: the empty jobs run from a second location (bench/dagster_bench_floor.py): the same code location
#: load as the batch run's, without the engine preload a location of queries starts in its runs
LOCATIONS = {"batch": "bench", "empty": "floor", "empty5": "floor"}




def main() -> int:
    import sqlalchemy as sa
    from orchestration.home import prepare_home
    from orchestration.local_instance import LocalDagster
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--drain-files", type=int, default=10)
    ap.add_argument("--imports", type=int, default=5)
    ap.add_argument("--celery", action="store_true", help="warm Celery workers vs the default run launcher "
                    "(issue 32 item 4; see celery_main)")
    ap.add_argument("--drain-rounds", type=int, default=2, help="with --celery: drains per launcher, alternating")
    ap.add_argument("--py-spy", metavar="FILE", help="with --celery: py-spy (raw, --idle) of the worker over the "
                    "counted rounds, into FILE (collapsed stacks; pip install -e '.[bench]')")
    args = ap.parse_args()
    if args.celery:
        return celery_main(args)
    root, db, admin, url = scratch("inc-bench-dagster-")
    env = prepare_home(os.path.join(root, "home"), pg_url=url)
    env.update(INCREMENTS_BENCH_DIR=root, PYTHONPATH=REPO, INCREMENTS_EXAMPLES_DIR=os.path.join(root, "examples"))
    run_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run_env.update(env)
    imports = import_costs(run_env, args.imports)
    ws = os.path.join(root, "workspace.yaml")
    with open(ws, "w") as f:
        f.write(f"load_from:\n  - python_file:\n      relative_path: {os.path.join(HERE, 'dagster_bench_location.py')}\n"
                f"      attribute: defs\n      working_directory: {REPO}\n      location_name: bench\n"
                f"  - python_file:\n      relative_path: {os.path.join(HERE, 'dagster_bench_floor.py')}\n"
                f"      attribute: defs\n      working_directory: {REPO}\n      location_name: floor\n")
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in RUN_KINDS}
    split: dict[str, list] = {k: [] for k in RUN_KINDS}
    lost: list[str] = []
    batch_ids: list[str] = []
    drain_ops: list[dict[str, float]] = []
    os.environ.update(env)
    import dagster as dg
    instance = dg.DagsterInstance.from_config(env["DAGSTER_HOME"])
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)       # the runs read the byte-compiled modules
    d = LocalDagster(env["DAGSTER_HOME"], ws, env=env, cwd=REPO, location="bench")
    try:
        d.start(180)
        for i in range(args.runs + 1):          # the first round warms up
            write_file(root, i)
            for kind in RUN_KINDS:
                d.location = LOCATIONS[kind]
                r = launched(d, instance, JOBS[kind], lost)
                d.location = "bench"
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


# -- --celery: batch runs on a warm Celery worker against the default run launcher (issue 32 item 4) --
CELERY_PHASES = ("queue", "to first op", "steps", "end")
LAUNCHERS = ("default", "celery")


def celery_phases(instance, run_id: str) -> tuple[dict[str, float], int]:
    """A run's phases from its event log: queue (created -> RUN_STARTING: the daemon's dequeue),
    to first op (-> RUN_START: the default launcher's new process and its imports, or the Celery
    task's trip to the warm worker and Dagster's run set-up there), steps (-> last step event),
    end (-> run end); and its number of events."""
    rec = instance.get_run_record_by_id(run_id)
    logs = instance.all_logs(run_id)
    def first(kind):
        return next((e.timestamp for e in logs if e.dagster_event and
                     e.dagster_event.event_type_value.replace("PIPELINE_", "RUN_") == kind), None)
    start = first("RUN_START")
    steps = [e.timestamp for e in logs if e.step_key]
    marks = [rec.create_timestamp.timestamp(), first("RUN_STARTING"), start, steps[-1] if steps else start,
             rec.end_time or logs[-1].timestamp]
    return ({n: b - a for n, a, b in zip(CELERY_PHASES, marks, marks[1:]) if a is not None and b is not None},
            len(logs))


def celery_round_trip(app, queue: str, n: int = 20) -> list[float]:
    """Seconds per Celery task round trip on this broker and backend: celery.ping (a no-op task
    every worker of this app has) sent to `queue` and its result read back."""
    out = []
    for _ in range(n + 2):
        t0 = time.perf_counter()
        app.send_task("celery.ping", queue=queue).get(timeout=120)
        out.append(time.perf_counter() - t0)
    return out[2:]


def _celery_instance(root: str, url: str, broker: str, backend: str) -> dict[str, str]:
    """A home whose run launcher is bench/dagster_bench_launcher.py (default or Celery per run tag)."""
    from orchestration.celery import instance_section
    from orchestration.home import prepare_home
    env = prepare_home(os.path.join(root, "home"), pg_url=url)
    with open(os.path.join(env["DAGSTER_HOME"], "dagster.yaml"), "a") as f:
        f.write("\n" + instance_section(broker, backend).replace("module: orchestration.celery", "module: dagster_bench_launcher")
                .replace("class: CeleryRunLauncher", "class: BenchDualRunLauncher"))
    return env


def _run_kind(d, instance, job: str, kind: str, lost: list[str]) -> dict:
    if kind == "default":
        return launched(d, instance, job, lost, tags={"bench/launcher": "default"})
    return d.wait_run(d.launch(job), 300)


def celery_drain(d, root: str, name: str, first_file: int, files: int) -> list[dict]:
    """One AvailableNow drain of `files` new files by query `name`; its batch runs, oldest first."""
    before = {r["runId"] for r in d.runs({"increments/query": name})}
    for i in range(first_file, first_file + files):
        write_file(root, i, landing=f"{name}_landing")
    d.wait_run(d.launch(f"{name}_available_now"), 300)
    deadline = time.monotonic() + 120 + 90 * files
    while True:
        runs = [r for r in d.runs({"increments/query": name}) if r["jobName"] == f"{name}_batch" and r["runId"] not in before]
        done = [r for r in runs if r["status"] == "SUCCESS" and r["tags"].get("increments/outcome") == "committed"]
        if len(done) >= files or time.monotonic() > deadline:
            return sorted(done, key=lambda r: int(r["tags"]["increments/batch_id"]))
        if any(r["status"] == "FAILURE" and r["tags"].get("increments/outcome") for r in runs):
            raise RuntimeError(f"drain {name} did not finish: {[(r['status'], r['tags']) for r in runs]}")
        time.sleep(1)


def celery_main(args) -> int:
    """--celery: one instance (daemon + webserver + PostgreSQL) whose runs are launched either by the
    default run launcher (tag bench/launcher=default: a fresh process per run) or as tasks on one
    warm Celery worker (RabbitMQ broker, Redis backend), alternating per round:
      1. the batch run (1,000 rows, as in 2.) and the empty one-op run, creation -> end, each
         launcher; ratio celery / default (goal <= 0.3 for the batch), phases and events;
      2. the floors: a Celery task's round trip (celery.ping), one event write on this storage;
      3. drain cadence of two identical AvailableNow queries, one per launcher, alternating.
    The worker's first run (its imports) is the warm-up round, not counted."""
    import sqlalchemy as sa
    from orchestration.celery import _celery_app, worker_command
    from orchestration.local_instance import LocalDagster
    root, db, admin, url = scratch("inc-bench-celery-")
    broker = os.environ.get("INCREMENTS_CELERY_BROKER", "pyamqp://guest:guest@127.0.0.1:5672//")
    backend = os.environ.get("INCREMENTS_CELERY_BACKEND", "redis://127.0.0.1:6379/5")
    env = _celery_instance(root, url, broker, backend)
    env.update(INCREMENTS_BENCH_DIR=root, PYTHONPATH=os.pathsep.join([REPO, HERE]),
               INCREMENTS_CELERY_BROKER=broker, INCREMENTS_CELERY_BACKEND=backend)
    ws = os.path.join(root, "workspace.yaml")
    with open(ws, "w") as f:
        f.write(f"load_from:\n  - python_file:\n      relative_path: {os.path.join(HERE, 'dagster_bench_celery_location.py')}\n"
                f"      attribute: defs\n      working_directory: {REPO}\n      location_name: bench\n")
    os.environ.update(env)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    run_env = dict(os.environ)
    app = _celery_app(broker, backend)
    with app.connection_for_write() as conn:
        try:
            conn.default_channel.queue_purge("increments-runs")
        except Exception:  # noqa: BLE001 - no such queue yet
            pass
    import dagster as dg
    instance = dg.DagsterInstance.from_config(env["DAGSTER_HOME"])
    d = LocalDagster(env["DAGSTER_HOME"], ws, env=run_env, cwd=REPO)
    log = open(os.path.join(root, "worker.log"), "w")
    worker = None
    wall = {(j, k): [] for j in ("batch", "empty") for k in LAUNCHERS}
    split = {key: [] for key in wall}
    lost: list[str] = []
    loads = [os.getloadavg()[0]]
    try:
        d.start(180)
        worker = subprocess.Popen(worker_command(["increments-runs"], "bench@%h", 1, "WARNING"),
                                  env={**run_env, "INCREMENTS_WARM_STATE": "1"},
                                  cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        spy = None
        for i in range(args.runs + 1):
            if i == 1 and args.py_spy:
                spy = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--idle",
                                        "--subprocesses", "-f", "raw", "-r", "50", "-o", args.py_spy, "-p", str(worker.pid)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            write_file(root, 2 * i)             # one new file for each kind's batch run
            write_file(root, 2 * i + 1)
            order = LAUNCHERS if i % 2 == 0 else LAUNCHERS[::-1]
            for job, name in (("batch", "bench_copy_batch"), ("empty", "empty_job")):
                for kind in order:
                    r = _run_kind(d, instance, name, kind, lost)
                    if r["status"] != "SUCCESS" or (job == "batch" and r["tags"].get("increments/outcome") != "committed"):
                        raise RuntimeError(f"{kind} run {r['runId']} {r['status']} {r['tags']}: " + " | ".join(
                            str(x.message)[:300] for x in instance.all_logs(r["runId"])[-6:]))
                    if i:                       # round 0 warms up (the worker's first run imports everything)
                        wall[(job, kind)].append(r["endTime"] - r["creationTime"])
                        split[(job, kind)].append(celery_phases(instance, r["runId"]))
            loads.append(os.getloadavg()[0])
        if spy is not None:
            spy.send_signal(2)
            spy.wait(60)
        per_event = event_write_cost(instance)                  # a new connection per statement, as a fresh run process
        instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=4)
        per_event_pooled = event_write_cost(instance)           # one pooled connection, as the warm worker
        trips = celery_round_trip(app, "increments-runs")
        celery_report(wall, split, (per_event, per_event_pooled), trips, lost, loads)
        drains = {k: [] for k in LAUNCHERS}
        for rnd in range(args.drain_rounds):
            for kind in (LAUNCHERS if rnd % 2 == 0 else LAUNCHERS[::-1]):
                runs = celery_drain(d, root, f"drain_{kind}", rnd * args.drain_files, args.drain_files)
                drains[kind].append(runs)
            loads.append(os.getloadavg()[0])
        celery_drain_report(drains, args.drain_files, loads)
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, 15)
            worker.wait(30)
        d.stop()
        instance.dispose()
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    return 0


def celery_report(wall, split, per_events, trips, lost, loads) -> None:
    per_event, pooled = per_events
    print(f"load average {min(loads):.1f}-{max(loads):.1f} (1-minute, per round) on {os.cpu_count()} CPUs")
    print("1. creation -> end, medians (runs), default run launcher vs one warm Celery worker, same instance")
    for job in ("batch", "empty"):
        d, c = _med(wall[(job, "default")]), _med(wall[(job, "celery")])
        print(f"   {job:5s} default {d:6.2f} s {[round(x, 2) for x in wall[(job, 'default')]]}")
        print(f"   {job:5s} celery  {c:6.2f} s {[round(x, 2) for x in wall[(job, 'celery')]]}")
        print(f"   {job:5s} celery / default {c / d:.2f}" + ("  (goal <= 0.3)" if job == "batch" else ""))
    print(f"   phases (medians, s; one event written: {per_event * 1000:.1f} ms on a new connection, as the default "
          f"launcher's run process does; {pooled * 1000:.1f} ms pooled, as the warm worker)")
    print("   " + " " * 14 + "".join(f"{p:>13s}" for p in CELERY_PHASES) + "   events  est. event writes")
    for key, rows in split.items():
        n = _med([k for _, k in rows])
        print(f"   {key[0]:5s} {key[1]:8s}" + "".join(f"{_med([p[x] for p, _ in rows if x in p]):13.2f}" for x in CELERY_PHASES)
              + f"   {n:6.0f}  {n * (per_event if key[1] == 'default' else pooled):6.2f} s")
    print(f"2. floors: Celery task round trip (celery.ping) median {_med(trips) * 1000:.1f} ms "
          f"(min {min(trips) * 1000:.1f}); one event write {per_event * 1000:.1f} ms new connection, "
          f"{pooled * 1000:.1f} ms pooled; the run queue's dequeue every 1 s (dagster.yaml): 0.5 s on average")
    if lost:
        print(f"   default runs lost at launch and launched again: {len(lost)}: {lost}")


def celery_drain_report(drains, files: int, loads) -> None:
    print(f"3. AvailableNow drains of {files} files, one file per batch (load average now {loads[-1]:.1f})")
    cad = {}
    for kind, rounds in drains.items():
        cs, owns = [], []
        for runs in rounds:
            if len(runs) >= 2:
                ends = [r["endTime"] for r in runs]
                cs.append((ends[-1] - ends[0]) / (len(ends) - 1))
                owns.append(statistics.median(r["endTime"] - r["startTime"] for r in runs))
        cad[kind] = _med(cs)
        print(f"   {kind:7s} cadence {[round(x, 2) for x in cs]} s per batch (median {cad[kind]:.2f}); runs' own "
              f"start -> end {[round(x, 2) for x in owns]}; cadence / own {_med(cs) / _med(owns):.2f}")
    print(f"   cadence celery / default {cad['celery'] / cad['default']:.2f}  (goal <= 0.3)")


if __name__ == "__main__":
    raise SystemExit(main())

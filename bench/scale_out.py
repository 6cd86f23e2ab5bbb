"""Heavy stateful batches spread over processes: each batch ~2M rows into the same 1M-key state
(group_by(key) with count and sum, update mode, RocksDB state, 4 partitions), several batches.

    .venv/bin/python bench/scale_out.py [--rows 2000000] [--keys 1000000] [--partitions 4] [--batches 3]
                                        [--modes in_process,multiprocess,celery] [--no-local] [--py-spy DIR]

Each mode runs the same batches on its own checkpoint, as Dagster runs fanned out per state
partition (plan -> read_split -> partition[p0..p3] -> join -> write -> commit) on one PostgreSQL
instance, rounds alternating the modes' order:
  in_process    every op in this process (the reference); its RocksDB working copies stay open
                between runs (INCREMENTS_WARM_STATE=1, as in a warm worker), so it is warm too;
  multiprocess  one fresh process per op (imports, runtime and store opens paid per op);
  celery        the steps as tasks on 2 warm Celery workers started here (`python -m
                orchestration.celery worker`, queues increments-p0 / increments-p1 + dagster):
                partition p always on the worker of queue increments-p<p mod 2>.
Batch 0 is cold for every mode (the state is built); the later batches are the steady state.
After each round the machine's parallel capacity is probed (parallel_capacity: what a second
process gains right now), the bound on what 2 workers can gain over one process.
Printed per batch and mode: run wall time, each step's duration (STEP_START -> STEP_SUCCESS), and
per partition op its worker, state_open (warm: the working copy as it was; cold: loaded from the
checkpoint), modules imported inside the op and its engine time; then the steady-state ratios
(goal: celery >= 1.0x the in_process wall time, i.e. no slower). The modes' state and output row
counts are checked equal. Finally (unless --no-local) the local runner with 1 and 4 partitions.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.environ.get("INCREMENTS_BENCH_DIR")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
PG = os.environ.get("INCREMENTS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MODES = ("in_process", "multiprocess", "celery")
FILES_PER_BATCH = 8


def query(checkpoint: str, partitions: int, name: str = "scale_out"):
    import increments as inc
    from increments import functions as F
    frame = inc.read_stream.files(os.path.join(ROOT, "in"), "parquet", "key BIGINT, v BIGINT",
                                  max_files_per_trigger=FILES_PER_BATCH)
    agg = frame.group_by("key").agg(F.count("v").alias("n"), F.sum("v").alias("total"))
    return (agg.write_stream.foreach_batch(_discard).output_mode("update")
            .option("state_partitions", partitions).checkpoint_location(checkpoint).query_name(name)
            .trigger(processing_time="1 minute"))


def _discard(table, batch_id) -> None:
    """The sink: the output (every key of the batch, update mode) is dropped; the bench is the state."""


def _factory(mode: str):
    def scale_out():          # one query name per mode: each keeps its own warm stores in this process
        return query(os.path.join(ROOT, f"chk_{mode}"), int(os.environ["INCREMENTS_BENCH_PARTS"]), f"scale_out_{mode}")
    return scale_out


def _job(mode: str):
    from orchestration import build_definitions
    opts = {"executor": mode, "fanout": True, "sensor_status": "stopped"}
    return build_definitions([(_factory(mode), opts)]).get_job_def(f"scale_out_{mode}_batch")


def job_in_process():
    return _job("in_process")


def job_multiprocess():
    return _job("multiprocess")


def job_celery():
    return _job("celery")


JOBS = {"in_process": job_in_process, "multiprocess": job_multiprocess, "celery": job_celery}


def make_input(root: str, rows: int, keys: int, batches: int) -> None:
    """FILES_PER_BATCH parquet files per batch; each batch holds every key once plus random repeats."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    d = os.path.join(root, "in")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    for b in range(batches):
        k = np.concatenate([np.arange(keys, dtype=np.int64), rng.integers(0, keys, max(rows - keys, 0))])
        rng.shuffle(k)
        per = -(-len(k) // FILES_PER_BATCH)
        for f in range(FILES_PER_BATCH):
            part = k[f * per:(f + 1) * per]
            pq.write_table(pa.table({"key": part, "v": rng.integers(0, 100, len(part))}),
                           os.path.join(d, f"part-{b:03d}-{f:03d}.parquet"))


def dagster_run(mode: str, instance) -> tuple[float, dict]:
    import dagster as dg
    t0 = time.perf_counter()
    res = dg.execute_job(dg.reconstructable(JOBS[mode]), instance=instance,
                         run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    wall = time.perf_counter() - t0
    assert res.success, res
    run = instance.get_run_by_id(res.run_id)
    assert run.tags.get("increments/outcome") == "committed", run.tags
    return wall, {**commit_info(mode), **step_timings(instance, res.run_id)}


def step_timings(instance, run_id: str) -> dict:
    """Each step's STEP_START -> STEP_SUCCESS, the partition ops' span (first start to last end)
    and each partition op's output metadata (worker, state_open, modules_imported, duration_ms)."""
    start, end, parts = {}, {}, {}
    for e in instance.all_logs(run_id):
        ev = e.dagster_event
        if ev is None or not e.step_key:
            continue
        short = re.sub(r"^.*__", "", e.step_key.split(".", 1)[-1])      # plan, read_split, partition[p0], ...
        if ev.event_type_value == "STEP_START":
            start[short] = e.timestamp
        elif ev.event_type_value == "STEP_SUCCESS":
            end[short] = e.timestamp
        elif ev.event_type_value == "STEP_OUTPUT" and short.startswith("partition["):
            md = ev.step_output_data.metadata
            parts[short] = {k: md[k].value for k in ("worker", "state_open", "modules_imported", "duration_ms") if k in md}
    steps = {k: end[k] - start[k] for k in end if k in start}
    pk = [k for k in steps if k.startswith("partition[")]
    return {"steps": steps, "parts": parts,
            "span_s": max(end[k] for k in pk) - min(start[k] for k in pk) if pk else 0.0}


def commit_info(mode: str) -> dict:
    rt = _factory(mode)().build()
    try:
        c = rt.log.latest_commit()
        ops = c.extra["state_operators"]
        return {"batch_id": c.batch_id, "rows_in": c.num_input_rows, "state_rows": sum(o["num_rows_total"] for o in ops),
                "output_rows": c.num_output_rows}
    finally:
        rt.close()


def local_run(partitions: int) -> tuple[float, dict]:
    w = query(os.path.join(ROOT, f"chk_local_{partitions}"), partitions, f"local_{partitions}").trigger(once=True)
    t0 = time.perf_counter()
    q = w.start()
    q.await_termination()
    wall = time.perf_counter() - t0
    p = q.last_progress
    return wall, {"rows_in": p["num_input_rows"], "state_rows": sum(o["num_rows_total"] for o in p["state_operators"]),
                  "batch_ms": p["duration_ms"].get("trigger_execution", 0)}


def start_workers(env: dict, log_dir: str) -> list[subprocess.Popen]:
    """Two warm workers: p0 serves queue increments-p0, p1 increments-p1, both the other steps' queue."""
    out = []
    for g in (0, 1):
        log = open(os.path.join(log_dir, f"worker-p{g}.log"), "w")
        out.append(subprocess.Popen([sys.executable, "-m", "orchestration.celery", "worker", "-Q",
                                     f"increments-p{g},dagster", "-n", f"p{g}@%h", "-c", "1"], env=env, cwd=REPO,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    from orchestration.celery import _celery_app
    app = _celery_app()
    import socket
    names = [f"p{g}@{socket.gethostname()}" for g in (0, 1)]
    deadline = time.monotonic() + 300
    while len(app.control.ping(destination=names, timeout=2.0)) < 2:
        if time.monotonic() > deadline or any(w.poll() is not None for w in out):
            raise RuntimeError(f"Celery workers did not start; see {log_dir}/worker-p*.log")
    return out


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def purge_queues() -> None:
    from orchestration.celery import _celery_app
    with _celery_app().connection_for_write() as conn:
        for q in ("dagster", "increments-p0", "increments-p1"):
            try:
                conn.default_channel.queue_purge(q)
            except Exception:  # noqa: BLE001 - no such queue yet
                pass


def parallel_capacity(n: int = 3_000_000) -> float:
    """What two processes get from this machine right now: the same pure-Python loop alone, then in
    two processes at once; 2 x alone / together (2.0: two free cores, 1.0: no gain from a second
    process). The Celery mode's partition ops can gain at most this over one process."""
    cmd = [sys.executable, "-c", f"s = 0\nfor i in range({n}): s += i * i"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    alone = time.perf_counter() - t0
    t0 = time.perf_counter()
    pair = [subprocess.Popen(cmd) for _ in range(2)]
    for p in pair:
        p.wait()
    return 2 * alone / (time.perf_counter() - t0)


def report_batch(b: int, mode: str, wall: float, r: dict) -> None:
    st = r["steps"]
    order = ["plan", "read"] + sorted(k for k in st if k.startswith("partition[")) + ["join", "write", "commit"]
    print(f"  batch {b} {mode:12s} wall {wall:7.2f} s | " + " ".join(f"{k.replace('partition', 'p')} {st[k]:.2f}"
                                                             for k in order if k in st)
          + f" | partitions span {r['span_s']:.2f} s")
    for k in sorted(r["parts"]):
        md = r["parts"][k]
        print(f"      {k:15s} worker {md.get('worker')!s:22s} state_open {md.get('state_open')!s:5s} "
              f"modules_imported {md.get('modules_imported')!s:5s} engine {md.get('duration_ms', 0) / 1000:.2f} s")


def main() -> None:
    global ROOT
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--no-local", action="store_true", help="skip the local runner's 1 vs 4 partitions")
    ap.add_argument("--py-spy", metavar="DIR", help="py-spy (raw) of this process and the workers per steady-state batch")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    own = ROOT is None
    ROOT = ROOT or tempfile.mkdtemp(prefix="increments-scale-out-")
    import sqlalchemy as sa
    from orchestration.home import prepare_home
    db = "inc_bench_so_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(PG, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{db}"'))
    env = prepare_home(os.path.join(ROOT, "dagster_home"),
                       pg_url=PG.rsplit("/", 1)[0].replace("+psycopg", "+psycopg2") + "/" + db)
    os.environ.update(env)
    os.environ.update(INCREMENTS_BENCH_DIR=ROOT, INCREMENTS_BENCH_PARTS=str(args.partitions),
                      INCREMENTS_WARM_STATE="1",           # the in_process reference keeps its stores open too
                      PYTHONPATH=os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    os.environ.setdefault("INCREMENTS_CELERY_BACKEND", "redis://127.0.0.1:6379/6")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")      # dagster's asset-job warning, once per op process
    import warnings
    warnings.simplefilter("ignore")
    import dagster as dg
    make_input(ROOT, args.rows, args.keys, args.batches)
    print(f"input: {args.batches} batches of {args.rows:,} rows over {args.keys:,} keys, {args.partitions} state "
          f"partitions, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}; {ROOT}")
    workers: list[subprocess.Popen] = []
    walls = {m: [] for m in modes}
    results = {m: [] for m in modes}
    loads: list[float] = []
    capacity: list[float] = []
    try:
        if "celery" in modes:
            purge_queues()
            workers = start_workers({k: v for k, v in os.environ.items() if k != "INCREMENTS_WARM_STATE"}, ROOT)
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as inst:
            # every mode's run process on pooled storage connections, as a warm worker's (celery_tasks.py)
            inst.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=4)
            for b in range(args.batches):
                order = modes if b % 2 == 0 else modes[::-1]
                for mode in order:
                    prof = None
                    if args.py_spy and b > 0:
                        os.makedirs(args.py_spy, exist_ok=True)
                        pids = [os.getpid()] + [w.pid for w in workers] if mode == "celery" else [os.getpid()]
                        prof = [subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record",
                                                  "--idle", "--subprocesses", "-f", "raw", "-r", "50", "-o",
                                                  os.path.join(args.py_spy, f"b{b}-{mode}-{pid}.raw"), "-p", str(pid)],
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in pids]
                        time.sleep(1)
                    wall, r = dagster_run(mode, inst)
                    for p in prof or []:
                        p.send_signal(signal.SIGINT)
                        p.wait(60)
                    assert r["batch_id"] == b, (mode, r)
                    walls[mode].append(wall)
                    results[mode].append(r)
                    report_batch(b, mode, wall, r)
                loads.append(os.getloadavg()[0])
                capacity.append(parallel_capacity())
                same = {(r[b]["rows_in"], r[b]["state_rows"], r[b]["output_rows"]) for r in results.values()}
                assert len(same) == 1, {m: results[m][b] for m in modes}
    finally:
        stop(workers)
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    print(f"load average per round: {[round(x, 1) for x in loads]}; parallel capacity per round (2.0: two free "
          f"cores, 1.0: a second process gains nothing): {[round(x, 2) for x in capacity]}")
    steady = {m: walls[m][1:] or walls[m] for m in modes}
    for m in modes:
        print(f"{m:12s} batch 0 (cold) {walls[m][0]:7.2f} s; later batches {[round(x, 2) for x in walls[m][1:]]} "
              f"(median {statistics.median(steady[m]):.2f} s)")
    if "in_process" in modes:
        ref = statistics.median(steady["in_process"])
        for m in modes:
            if m != "in_process":
                print(f"  steady state, in_process wall / {m} wall: {ref / statistics.median(steady[m]):.2f}x"
                      + ("  (goal >= 1.0)" if m == "celery" else ""))
    if not args.no_local:
        l1_wall, l1 = local_run(1)
        l4_wall, l4 = local_run(args.partitions)
        print(f"local runner (batch 0 only), 1 partition: {l1_wall:6.2f} s (batch {l1['batch_ms'] / 1000:.2f} s); "
              f"{args.partitions} partitions: {l4_wall:6.2f} s (batch {l4['batch_ms'] / 1000:.2f} s); "
              f"ratio {l1['batch_ms'] / max(l4['batch_ms'], 1):.2f}x")
    if own:
        shutil.rmtree(ROOT, ignore_errors=True)


if __name__ == "__main__":
    main()

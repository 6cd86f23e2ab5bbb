"""Batch runs on warm Celery workers (issue 32 item 1, with real parts): a Dagster instance whose
run launcher is orchestration.celery.CeleryRunLauncher (PostgreSQL storage, daemon + webserver),
the machine's RabbitMQ broker and Redis result backend, real `python -m orchestration.celery
worker` processes started here, checkpoint, input and output on the moto S3 server, the batch log
in PostgreSQL. SIGKILL of the whole worker during a batch run: the run is marked failed, retried
once on a new worker, batch 0 is redone exactly once, and the output equals the local runner's."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from orch_testutil import create_db, drop_db

pytestmark = pytest.mark.dagster
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _need(port: int, what: str, start: str) -> None:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        pytest.fail(f"{what} is not running on 127.0.0.1:{port} (the warm-worker tests need it); start it with: {start}")


def _start_worker(env: dict, root: str, name: str, queues: str = "increments-runs") -> subprocess.Popen:
    log = open(os.path.join(root, f"worker-{name}.log"), "w")
    return subprocess.Popen([sys.executable, "-m", "orchestration.celery", "worker", "-Q", queues,
                             "-n", f"{name}@%h", "-c", "1"], env=env, cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(5)


def _purge(broker: str) -> None:
    from orchestration.celery import _celery_app
    app = _celery_app(broker)
    with app.connection_for_write() as conn:
        try:
            conn.default_channel.queue_purge("increments-runs")
        except Exception:  # noqa: BLE001 - no such queue yet
            pass


def _ids(path: str) -> list[int]:
    import increments as inc
    t = inc.read.parquet_sink(path)
    return sorted(t.column("id").to_pylist()) if t.num_rows else []


def _need_brokers() -> None:
    _need(5672, "RabbitMQ", "rabbitmq-server -detached")
    _need(6379, "Redis", "redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no")


BROKER, BACKEND = "pyamqp://guest:guest@127.0.0.1:5672//", "redis://127.0.0.1:6379/3"


@pytest.fixture
def celery_home(tmp_path, s3_bucket, monkeypatch):
    """A Dagster home on PostgreSQL whose run launcher is the CeleryRunLauncher, a database for the
    batch log, and the Celery broker and backend, the log, the bucket and the test directory in this
    process's environment and in `env` (the environment of worker processes, with the repo and
    tests/orchestration on PYTHONPATH); the increments-runs queue purged. Stops the workers a test
    appends to "workers" and drops the databases afterwards."""
    _need_brokers()
    from orchestration.home import prepare_home
    root = str(tmp_path)
    dag_db, dag_url = create_db("inc_dagster_celery")
    log_db, log_url = create_db("inc_log_celery")
    for k, v in dict(INCREMENTS_CELERY_BROKER=BROKER, INCREMENTS_CELERY_BACKEND=BACKEND, INCREMENTS_LOG_URL=log_url,
                     INCREMENTS_TEST_BUCKET=s3_bucket, INCREMENTS_TEST_DIR=root).items():
        monkeypatch.setenv(k, v)
    home = os.path.join(root, "home")
    env = {**os.environ, **prepare_home(home, pg_url=dag_url.replace("postgresql+psycopg://", "postgresql+psycopg2://"),
                                        celery=True),
           "PYTHONPATH": os.pathsep.join([REPO, HERE])}
    monkeypatch.setenv("DAGSTER_PG_URL", env["DAGSTER_PG_URL"])
    _purge(BROKER)
    workers: list = []
    try:
        yield {"home": home, "env": env, "root": root, "workers": workers, "log_url": log_url, "bucket": s3_bucket,
               "dagster_db": dag_db}
    finally:
        for w in workers:
            _stop(w)
        from increments.checkpoint.log import _ENGINES
        for u in [u for u in _ENGINES if u == log_url]:
            _ENGINES.pop(u).dispose()
        drop_db(dag_db)
        drop_db(log_db)


@pytest.fixture
def warm(celery_home):
    """celery_home, started as an instance (daemon + webserver) over tests/orchestration/celery_queries.py,
    worker w1 running, two input files on S3; yields celery_home's keys and "inst"."""
    from orchestration.local_instance import LocalDagster
    import obstore
    c = celery_home
    store = obstore.store.from_url(c["bucket"])
    for f in range(2):
        rows = "".join(json.dumps({"id": f * 1000 + r, "name": f"n{f}-{r}"}) + "\n" for r in range(50))
        obstore.put(store, f"in/part-{f:04d}.json", rows.encode())
    ws = os.path.join(c["root"], "workspace.yaml")
    with open(ws, "w") as f:
        f.write(f"load_from:\n  - python_file:\n      relative_path: {os.path.join(HERE, 'celery_queries.py')}\n"
                f"      attribute: defs\n      working_directory: {REPO}\n      location_name: celery_test\n")
    inst = LocalDagster(c["home"], ws, env=c["env"], cwd=REPO)
    c["workers"].append(_start_worker(c["env"], c["root"], "w1"))
    try:
        inst.start(timeout=180)
        yield {**c, "inst": inst}
    finally:
        inst.stop()


def _launch_and_wait_for_pause(warm) -> str:
    """Launch batch 0 with the pause marker set; return its run id once the run sits in its pause
    inside w1's pool process (the test query writes worker.pid there)."""
    from orchestration.local_instance import timeout_scale
    open(os.path.join(warm["root"], "pause"), "w").close()
    run_id = warm["inst"].launch("warm_copy_batch")
    pid_file = os.path.join(warm["root"], "worker.pid")
    deadline = time.monotonic() + 120 * timeout_scale()
    while not os.path.exists(pid_file):
        assert time.monotonic() < deadline, "the run did not reach its pause on the worker"
        time.sleep(0.5)
    assert os.getpgid(int(open(pid_file).read())) == warm["workers"][0].pid   # inside the worker's pool process
    return run_id


def _wait_for_retry(warm, run_id: str) -> dict:
    """The failed run's one automatic retry, waited to its end: it committed batch 0."""
    from orchestration.local_instance import timeout_scale
    inst = warm["inst"]
    deadline = time.monotonic() + 120 * timeout_scale()
    while True:
        retries = [r for r in inst.runs({"increments/query": "warm_copy"})
                   if r["tags"].get("dagster/parent_run_id") == run_id]
        if retries:
            break
        assert time.monotonic() < deadline, "no automatic retry of the failed run"
        time.sleep(1)
    retry = inst.wait_run(retries[0]["runId"], 180)
    assert (retry["status"], retry["tags"]["increments/batch_id"]) == ("SUCCESS", "0")
    return retry


def _assert_redone_once_and_output_equals_local(warm, retry: dict) -> None:
    inst, bucket = warm["inst"], warm["bucket"]
    msgs = [e.get("message") or "" for e in inst.run_events(retry["runId"])]
    assert any("redo (attempt 2)" in m for m in msgs), msgs      # batch 0 redone, from offsets[0]
    nxt = inst.wait_run(inst.launch("warm_copy_batch"), 180)
    assert (nxt["status"], nxt["tags"]["increments/batch_id"]) == ("SUCCESS", "1")
    assert len([r for r in inst.runs({"increments/query": "warm_copy"})]) == 3   # run, its one retry, batch 1
    out = _ids(f"{bucket}/out")
    import celery_queries
    celery_queries.warm_copy(bucket, out="ref_out", chk="ref_chk", trigger={"available_now": True}).option(
        "log_url", warm["log_url"]).start().await_termination()
    assert out == _ids(f"{bucket}/ref_out") == sorted(f * 1000 + r for f in range(2) for r in range(50))


def test_sigkilled_worker_run_is_retried_and_batch_redone_once(warm):
    run_id = _launch_and_wait_for_pause(warm)
    w1 = warm["workers"][0]
    os.killpg(w1.pid, signal.SIGKILL)                  # the whole worker dies mid-batch (output written)
    w1.wait(10)
    assert warm["inst"].wait_run(run_id, 120)["status"] == "FAILURE"
    warm["workers"].append(_start_worker(warm["env"], warm["root"], "w2"))
    _assert_redone_once_and_output_equals_local(warm, _wait_for_retry(warm, run_id))


def _wait_for_refusal(warm, run_id: str) -> dict:
    """The lost attempt of `run_id`, resumed, reaches its commit and is refused by the log's fence:
    its run gets outcome "refused" (ops.refusal_tags) once that happens."""
    from orchestration.local_instance import timeout_scale
    deadline = time.monotonic() + 120 * timeout_scale()
    while True:
        r = warm["inst"].run(run_id)
        if r["tags"].get("increments/outcome") == "refused":
            return r
        assert time.monotonic() < deadline, f"the resumed attempt of run {run_id} was never refused: {r['tags']}"
        time.sleep(0.5)


def test_sigstopped_worker_that_lost_its_batch_commits_nothing(warm):
    """Item 3: the fence across workers. w1 is SIGSTOPped mid-batch (its output written), its run is
    failed (no ping answer) and retried on w2, which commits batch 0; w1 then resumes and its
    attempt cannot commit state or output: the log's fence refuses it (the lost run's commit step
    fails "refused": batch 0 is already committed), each row is in the sink once."""
    run_id = _launch_and_wait_for_pause(warm)
    w1 = warm["workers"][0]
    os.killpg(w1.pid, signal.SIGSTOP)                  # the whole worker is paused mid-batch
    assert warm["inst"].wait_run(run_id, 120)["status"] == "FAILURE"
    warm["workers"].append(_start_worker(warm["env"], warm["root"], "w2"))
    retry = _wait_for_retry(warm, run_id)
    os.killpg(w1.pid, signal.SIGCONT)                  # the lost attempt wakes up ...
    open(os.path.join(warm["root"], "release"), "w").close()     # ... leaves its pause and goes on to commit
    lost = _wait_for_refusal(warm, run_id)
    assert lost["tags"]["increments/batch_id"] == "0"
    assert lost["tags"]["increments/reason"] == f"batch 0 is already committed; run {run_id} refuses to apply it again"
    failures = [e for e in warm["inst"].run_events(run_id) if e["__typename"] == "ExecutionStepFailureEvent"]
    assert [(e["stepKey"], (e["failureMetadata"] or {}).get("description", "")[:9]) for e in failures] == \
        [("warm_copy.commit", "refused: ")], failures
    assert retry["tags"].get("increments/outcome") == "committed"
    _assert_redone_once_and_output_equals_local(warm, retry)


def test_one_run_per_query_in_flight_on_celery_workers(warm):
    """Item 1: the run queue keeps one run per query in flight with the Celery launcher too. Batch 0
    of warm_copy is paused on w1; a second warm_copy run stays queued while w2 is idle and runs
    another query's run; once batch 0 ends, the queued run starts and commits batch 1."""
    first = _launch_and_wait_for_pause(warm)
    inst = warm["inst"]
    second = inst.launch("warm_copy_batch")
    warm["workers"].append(_start_worker(warm["env"], warm["root"], "w2"))
    other = inst.wait_run(inst.launch("other_copy_batch"), 180)    # dequeued after `second`, run on w2
    assert (other["status"], other["tags"].get("increments/outcome")) == ("SUCCESS", "idle"), \
        [e["failureMetadata"] for e in inst.run_events(other["runId"]) if e["__typename"] == "ExecutionStepFailureEvent"]
    assert inst.run(second)["status"] == "QUEUED"       # held by the tag limit, not by a busy worker
    assert inst.run(first)["status"] == "STARTED"
    open(os.path.join(warm["root"], "release"), "w").close()
    a, b = inst.wait_run(first, 180), inst.wait_run(second, 180)
    assert [(r["status"], r["tags"]["increments/batch_id"]) for r in (a, b)] == [("SUCCESS", "0"), ("SUCCESS", "1")]
    assert b["startTime"] >= a["endTime"]
    assert _ids(f"{warm['bucket']}/out") == sorted(f * 1000 + r for f in range(2) for r in range(50))


def _pg_client_ports(pid: int) -> set[int]:
    """Local TCP ports of process `pid`'s connections to PostgreSQL (port 5432), from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[9] in inodes and int(cols[2].rsplit(":", 1)[1], 16) == 5432:
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def test_warm_worker_replaces_dropped_database_connections(warm):
    """The warm worker keeps its Dagster instance and pooled storage connections between runs
    (orchestration/celery_tasks.py). Those connections are terminated by the server between two
    batches (as after a database restart): the next run on the same worker process still runs
    and commits its batch (the task's first read fails once, the pool reconnects)."""
    import sqlalchemy as sa
    from orch_testutil import PG_ADMIN_URL
    inst = warm["inst"]
    first = inst.wait_run(inst.launch("warm_copy_batch"), 180)
    assert (first["status"], first["tags"]["increments/batch_id"]) == ("SUCCESS", "0")
    w1 = warm["workers"][0].pid
    with open(f"/proc/{w1}/task/{w1}/children") as f:
        (pool,) = [int(c) for c in f.read().split()]          # -c 1: one pool process, the runs' process
    ports = _pg_client_ports(pool)
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        killed = c.execute(sa.text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                   "WHERE datname = :db AND client_port = ANY(:ports)"),
                           {"db": warm["dagster_db"], "ports": sorted(ports)}).scalar()
    admin.dispose()
    assert killed >= 1                                   # the worker held pooled connections to Dagster's storage
    second = inst.wait_run(inst.launch("warm_copy_batch"), 180)
    assert (second["status"], second["tags"]["increments/batch_id"]) == ("SUCCESS", "1")
    assert second["tags"]["increments/celery_worker"] == first["tags"]["increments/celery_worker"]
    with open(f"/proc/{w1}/task/{w1}/children") as f:
        assert [int(c) for c in f.read().split()] == [pool]      # the same warm process ran it
    assert _ids(f"{warm['bucket']}/out") == sorted(f * 1000 + r for f in range(2) for r in range(50))

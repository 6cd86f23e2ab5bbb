"""The Celery run launcher and a warm worker write to the same stored run (issue 32, real parts:
RabbitMQ, Redis, PostgreSQL storage, a real worker process, files on the moto S3 server). A warm
worker takes a run's task the moment it reaches the broker, tags the run with its own name and
starts it; Dagster's add_run_tags rewrites the whole stored run from what it read just before. The
launcher records the run's Celery task id before it sends the task, so neither write is lost: the
run shows the worker it ran on (what run monitoring pings) and its task id (what terminating the
run from the UI revokes)."""
from __future__ import annotations

import os
import socket
import time

import pytest

from orch_testutil import create_db, drop_db
from test_celery_runs import HERE, REPO, _ids, _need_brokers, _purge, _start_worker, _stop

pytestmark = pytest.mark.dagster


def _wait_for_worker(name: str, broker: str, backend: str) -> None:
    from orchestration.celery import _celery_app
    from orchestration.local_instance import timeout_scale
    app = _celery_app(broker, backend)
    deadline = time.monotonic() + 120 * timeout_scale()
    while not app.control.ping(destination=[name], timeout=1.0):
        assert time.monotonic() < deadline, f"Celery worker {name} did not answer a ping"


def _slow_tag_writes(instance, monkeypatch, seconds: float) -> None:
    """The instance's add_run_tags waits `seconds` between its read of the run and its write (a slow
    run storage): the window in which another process's write to the run would be overwritten."""
    storage = instance.run_storage
    add, read = storage.add_run_tags, storage._get_run_by_id

    def read_then_wait(run_id):
        run = read(run_id)
        time.sleep(seconds)
        return run

    def add_slowly(run_id, new_tags):
        storage._get_run_by_id = read_then_wait
        try:
            return add(run_id, new_tags)
        finally:
            del storage._get_run_by_id
    monkeypatch.setattr(storage, "add_run_tags", add_slowly)


def test_a_run_taken_at_once_by_a_warm_worker_keeps_the_worker_and_task_tags(tmp_path, s3_bucket, monkeypatch):
    _need_brokers()
    import dagster as dg
    import obstore
    from dagster_celery.tags import DAGSTER_CELERY_TASK_ID_TAG
    from orchestration.celery_warm import WORKER_TAG
    from orchestration.home import prepare_home
    root = str(tmp_path)
    dag_db, dag_url = create_db("inc_dagster_cl")
    log_db, log_url = create_db("inc_log_cl")
    broker, backend = "pyamqp://guest:guest@127.0.0.1:5672//", "redis://127.0.0.1:6379/3"
    for k, v in dict(INCREMENTS_CELERY_BROKER=broker, INCREMENTS_CELERY_BACKEND=backend, INCREMENTS_LOG_URL=log_url,
                     INCREMENTS_TEST_BUCKET=s3_bucket, INCREMENTS_TEST_DIR=root).items():
        monkeypatch.setenv(k, v)
    home = os.path.join(root, "home")
    env = {**os.environ, **prepare_home(home, pg_url=dag_url.replace("postgresql+psycopg://", "postgresql+psycopg2://"),
                                        celery=True),
           "PYTHONPATH": os.pathsep.join([REPO, HERE])}
    monkeypatch.setenv("DAGSTER_PG_URL", env["DAGSTER_PG_URL"])
    store = obstore.store.from_url(s3_bucket)
    obstore.put(store, "in/part-0000.json", "".join(f'{{"id": {i}, "name": "n{i}"}}\n' for i in range(50)).encode())
    _purge(broker)
    host = socket.gethostname()
    worker = _start_worker(env, root, "w1")
    import celery_queries
    try:
        _wait_for_worker(f"w1@{host}", broker, backend)
        with dg.DagsterInstance.from_config(home) as inst:
            job = dg.reconstructable(celery_queries.copy_job)
            run = inst.create_run_for_job(job_def=job.get_definition(), job_code_origin=job.get_python_origin())
            _slow_tag_writes(inst, monkeypatch, 3.0)
            inst.launch_run(run.run_id, workspace=None)          # what the daemon or the webserver does
            deadline = time.monotonic() + 180
            while not (run := inst.get_run_by_id(run.run_id)).is_finished:
                assert time.monotonic() < deadline, f"run {run.run_id} did not finish: {run.status}"
                time.sleep(0.5)
            assert run.status == dg.DagsterRunStatus.SUCCESS
            assert run.tags[WORKER_TAG] == f"w1@{host}"               # where the batch ran
            assert run.tags[DAGSTER_CELERY_TASK_ID_TAG]               # what terminating the run revokes
            assert run.tags["increments/batch_id"] == "0"
        assert _ids(f"{s3_bucket}/out") == list(range(50))
    finally:
        _stop(worker)
        from increments.checkpoint.log import _ENGINES
        for u in [u for u in _ENGINES if u == log_url]:
            _ENGINES.pop(u).dispose()
        drop_db(dag_db)
        drop_db(log_db)

"""The Celery run launcher and a warm worker write to the same stored run (issue 32, real parts:
RabbitMQ, Redis, PostgreSQL storage, a real worker process, files on the moto S3 server). A warm
worker takes a run's task the moment it reaches the broker, tags the run with its own name and
starts it; Dagster's add_run_tags rewrites the whole stored run from what it read just before. The
launcher records the run's Celery task id before it sends the task, so neither write is lost: the
run shows the worker it ran on (what run monitoring pings) and its task id (what terminating the
run from the UI revokes)."""
from __future__ import annotations

import socket
import time

import pytest

from test_celery_runs import BACKEND, BROKER, _ids, _start_worker, celery_home  # noqa: F401 - the fixture

pytestmark = pytest.mark.dagster


def _wait_for_worker(name: str) -> None:
    from orchestration.celery import _celery_app
    from orchestration.local_instance import timeout_scale
    app = _celery_app(BROKER, BACKEND)
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


def test_a_run_taken_at_once_by_a_warm_worker_keeps_the_worker_and_task_tags(celery_home, monkeypatch):
    import dagster as dg
    import obstore
    from dagster_celery.tags import DAGSTER_CELERY_TASK_ID_TAG
    from orchestration.celery_warm import WORKER_TAG
    c = celery_home
    obstore.put(obstore.store.from_url(c["bucket"]), "in/part-0000.json",
                "".join(f'{{"id": {i}, "name": "n{i}"}}\n' for i in range(50)).encode())
    host = socket.gethostname()
    c["workers"].append(_start_worker(c["env"], c["root"], "w1"))
    _wait_for_worker(f"w1@{host}")
    import celery_queries
    with dg.DagsterInstance.from_config(c["home"]) as inst:
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
    assert _ids(f"{c['bucket']}/out") == list(range(50))

"""Partition ops on warm Celery workers (issue 32 item 2, real parts): `executor="celery"`, two
real worker processes (queues increments-p0 and increments-p1, both also on `dagster`), RabbitMQ
broker, Redis backend, checkpoint and data on the moto S3 server, log in PostgreSQL. Partition p
runs on the worker of queue increments-p<p> in every batch; from the second batch on its state
opens from that worker's working copy (warm); the output equals the local runner's. Runs executed
in this process (execute_job), and runs launched by the CeleryRunLauncher onto a run worker."""
from __future__ import annotations

import json

import pytest

from test_celery_runs import _start_worker, celery_home, warm  # noqa: F401 - the fixtures

pytestmark = pytest.mark.dagster


def _rows(path):
    import increments as inc
    t = inc.read.parquet_sink(path)
    return sorted((r["window"]["start"].isoformat(), r["campaign_id"], r["count"]) for r in t.to_pylist())


def _put_clicks(bucket: str) -> None:
    import datetime as dt
    import obstore
    store = obstore.store.from_url(bucket)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for f in range(3):
        rows = "".join(json.dumps({"campaign_id": f"c{r % 7}", "event_time": (t0 + dt.timedelta(minutes=f * 12 + r))
                                   .isoformat().replace("+00:00", "Z")}) + "\n" for r in range(20))
        obstore.put(store, f"cin/part-{f:04d}.json", rows.encode())


def _partition_outputs(inst, run_id: str, seen: dict) -> None:
    """Append (worker, state_open) of each partition op of the run to seen[p<n>]."""
    from dagster._core.events import DagsterEventType
    for ev in inst.all_logs(run_id, of_type=DagsterEventType.STEP_OUTPUT):
        if ".partition[" in (ev.step_key or ""):
            md = ev.dagster_event.step_output_data.metadata
            seen.setdefault(ev.step_key.split("[")[1].rstrip("]"), []).append(
                (md["worker"].value, md.get("state_open").value if md.get("state_open") else None))


def _assert_each_partition_on_its_worker_warm(seen: dict) -> None:
    host = __import__("socket").gethostname()
    n = len(seen["p0"])
    assert n >= 3 and len(seen["p1"]) == n
    assert [w for w, _ in seen["p0"]] == [f"p0@{host}"] * n      # the same queue, the same worker, every batch
    assert [w for w, _ in seen["p1"]] == [f"p1@{host}"] * n
    assert [s for _, s in seen["p0"][1:]] == ["warm"] * (n - 1) == [s for _, s in seen["p1"][1:]]


def test_partition_p_runs_on_its_queue_warm_and_output_equals_local(celery_home):
    import dagster as dg
    c = celery_home
    _put_clicks(c["bucket"])
    c["workers"] += [_start_worker(c["env"], c["root"], "p0", "increments-p0,dagster"),
                     _start_worker(c["env"], c["root"], "p1", "increments-p1,dagster")]
    import celery_queries
    seen: dict[str, list] = {}
    with dg.DagsterInstance.from_config(c["home"]) as inst:
        for _ in range(6):                           # until idle (the last batch is the watermark's)
            res = dg.execute_job(dg.reconstructable(celery_queries.counts_job), instance=inst)
            assert res.success
            if inst.get_run_by_id(res.run_id).tags.get("increments/outcome") == "idle":
                break
            _partition_outputs(inst, res.run_id, seen)
    _assert_each_partition_on_its_worker_warm(seen)
    celery_queries.warm_counts(c["bucket"], out="ref_counts", chk="ref_counts_chk",
                               trigger={"available_now": True}).start().await_termination()
    assert _rows(f"{c['bucket']}/counts") == _rows(f"{c['bucket']}/ref_counts")


def test_launched_runs_on_a_run_worker_fan_out_to_partition_workers(warm):
    """Items 1 and 2 together, as deployed (deploy/k8s-celery-workers.yaml): each batch run of the
    executor="celery" query is launched by the CeleryRunLauncher onto run worker w1, and from there
    its steps go to workers p0 and p1, partition p always on p<p>'s queue, warm from batch 1; the
    output equals the local runner's."""
    import dagster as dg
    inst, bucket = warm["inst"], warm["bucket"]
    _put_clicks(bucket)
    warm["workers"] += [_start_worker(warm["env"], warm["root"], "p0", "increments-p0,dagster"),
                        _start_worker(warm["env"], warm["root"], "p1", "increments-p1,dagster")]
    host = __import__("socket").gethostname()
    seen: dict[str, list] = {}
    with dg.DagsterInstance.from_config(warm["home"]) as local:
        for _ in range(6):                           # until idle (the last batch is the watermark's)
            r = inst.wait_run(inst.launch("warm_counts_batch"), 180)
            assert r["status"] == "SUCCESS", [e for e in inst.run_events(r["runId"]) if e.get("level") == "ERROR"]
            assert r["tags"]["increments/celery_worker"] == f"w1@{host}"      # the run itself, on the run worker
            if r["tags"].get("increments/outcome") == "idle":
                break
            _partition_outputs(local, r["runId"], seen)
    _assert_each_partition_on_its_worker_warm(seen)
    import celery_queries
    celery_queries.warm_counts(bucket, out="ref_counts", chk="ref_counts_chk", trigger={"available_now": True}).option(
        "log_url", warm["log_url"]).start().await_termination()
    assert _rows(f"{bucket}/counts") == _rows(f"{bucket}/ref_counts")

"""No shared disk: a stateful query's batches run as Dagster runs with the multiprocess executor
(one process per op: plan, read_split, one per state partition, join, write, commit), the
checkpoint, input and output on the S3 emulator and the batch log in PostgreSQL. Successive
batches alternate between two "machines": two Dagster homes (each its own SQLite instance) and
working directories, sharing only PostgreSQL and the store; every op process runs in a private
working directory with its own TMPDIR (scale_out_location.py), and each machine's local files are
wiped after every run. The output equals the local runner's."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys

import increments as inc
from increments import storage

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

RUN = """
import json, dagster as dg, scale_out_location as m
with dg.DagsterInstance.get() as inst:
    res = dg.execute_job(dg.reconstructable(m.batch_job), instance=inst, raise_on_error=False)
    run = inst.get_run_by_id(res.run_id)
    steps = [e.step_key.split(".", 1)[-1] for e in inst.all_logs(res.run_id)   # without the graph node
             if e.dagster_event and e.dagster_event.event_type_value == "STEP_SUCCESS"]
    print("RESULT " + json.dumps({"outcome": run.tags.get("increments/outcome"),
                                  "batch": run.tags.get("increments/batch_id"), "steps": steps}))
"""


def _inputs(bucket: str, files: int) -> None:
    loc = storage.location(f"{bucket}/in")
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for f in range(files):
        lines = [json.dumps({"campaign_id": f"c{i % 5}", "event_time": (t0 + dt.timedelta(minutes=f * 12 + i))
                             .isoformat().replace("+00:00", "Z")}) for i in range(15)]
        loc.write_bytes(f"clicks-{f:03d}.json", ("\n".join(lines) + "\n").encode())


def _rows(table) -> list:
    return sorted((r["window"]["start"].isoformat(), r["campaign_id"], r["count"]) for r in table.to_pylist())


def test_batches_alternate_between_two_machines_sharing_only_postgres_and_s3(tmp_path, s3_bucket, pg_url):
    sys.path.insert(0, HERE)
    import scale_out_location as loc
    _inputs(s3_bucket, 2)
    ref = loc.windowed_clicks(s3_bucket, str(tmp_path / "ref_chk")).option("log_url", None) \
        .option("path", str(tmp_path / "ref_out")).trigger(available_now=True)
    ref.start().await_termination()
    expected = _rows(inc.read.parquet_sink(str(tmp_path / "ref_out")))
    assert expected

    machines = []
    for name in ("a", "b"):
        m = tmp_path / name
        (m / "home").mkdir(parents=True)
        (m / "work").mkdir()
        machines.append(m)
    env = {**os.environ, "INCREMENTS_TEST_BUCKET": s3_bucket, "INCREMENTS_LOG_URL": pg_url,
           "PYTHONPATH": os.pathsep.join([HERE, REPO])}
    env.pop("INCREMENTS_LOCAL_DIR", None)
    results, used = [], []
    for i in range(8):
        m = machines[i % 2]
        private = m / "work" / "private"
        proc = subprocess.run([sys.executable, "-c", RUN], cwd=m / "work", capture_output=True, text=True,
                              env={**env, "DAGSTER_HOME": str(m / "home"), "INCREMENTS_TEST_PRIVATE": str(private),
                                   "TMPDIR": str(m / "work")}, timeout=600)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert line, proc.stdout[-3000:] + proc.stderr[-6000:]
        res = json.loads(line[0][len("RESULT "):])
        results.append(res)
        if res["outcome"] == "committed":
            # the run's process and one process per op, each in its own directory
            assert len(os.listdir(private)) >= 1 + len(res["steps"]), (os.listdir(private), res)
            assert sorted(s for s in res["steps"] if s.startswith("partition")) == ["partition[p0]", "partition[p1]"]
        used.append(m.name)
        shutil.rmtree(private, ignore_errors=True)          # nothing local survives a run
        if res["outcome"] != "committed":
            break
    outcomes = [r["outcome"] for r in results]
    assert outcomes[-1] == "idle" and set(outcomes[:-1]) == {"committed"}, results
    assert [int(r["batch"]) for r in results[:-1]] == list(range(len(results) - 1))
    assert {"a", "b"} <= set(used[:-1])
    assert _rows(inc.read.parquet_sink(f"{s3_bucket}/out")) == expected

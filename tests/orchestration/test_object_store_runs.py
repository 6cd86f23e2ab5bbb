"""Batches as Dagster runs with everything on object storage: input files, the checkpoint (and the
data staged between the ops) and a Parquet sink on a real S3-compatible server, the log in
PostgreSQL. Each run builds its runtime from scratch, as a run in a fresh container would; the
output equals the input row for row, and no secret of the query's storage_options reaches a run
tag, an event, asset metadata or a check."""
from __future__ import annotations

import json

import dagster as dg

import increments as inc
from increments import storage
from orchestration import build_definitions

SECRET = "S3cr3t-only-in-storage-options-42"


def _query(bucket: str, log_url: str):
    opts = {"aws_secret_access_key": SECRET}

    def s3_clicks():
        frame = inc.read_stream.files(f"{bucket}/landing", format="json", schema="id BIGINT, name STRING",
                                      max_files_per_trigger=1, storage_options=opts)
        return (frame.write_stream.format("parquet").output_mode("append")
                .checkpoint_location(f"{bucket}/chk/s3_clicks").query_name("s3_clicks")
                .option("log_url", log_url).option("storage_options", opts)
                .trigger(processing_time="1 minute"))
    return s3_clicks


def _write(bucket: str, n: int, start: int = 0) -> list[dict]:
    loc = storage.location(f"{bucket}/landing")
    rows = []
    for f in range(start, start + n):
        part = [{"id": f * 100 + r, "name": f"n{f}-{r}"} for r in range(20)]
        loc.write_bytes(f"part-{f:04d}.json", "".join(json.dumps(r) + "\n" for r in part).encode())
        rows += part
    return rows


def test_batch_runs_on_object_storage_leak_no_secret(s3_bucket, pg_url):
    rows = _write(s3_bucket, 3)
    defs = build_definitions([(_query(s3_bucket, pg_url), {"path": f"{s3_bucket}/out", "sensor_status": "stopped"})])
    job = defs.get_job_def("s3_clicks_batch")
    inst = dg.DagsterInstance.ephemeral()
    outcomes = []
    for _ in range(4):                           # three batches, then an idle run
        res = job.execute_in_process(instance=inst, raise_on_error=False)
        outcomes.append(inst.get_run_by_id(res.run_id).tags.get("increments/outcome"))
    assert outcomes == ["committed", "committed", "committed", "idle"], outcomes
    out = inc.read.parquet_sink(f"{s3_bucket}/out")
    assert sorted(out.to_pylist(), key=lambda r: r["id"]) == rows
    # the data handed between the ops lived under the checkpoint and was cleared at each commit
    assert storage.location(f"{s3_bucket}/chk/s3_clicks").list("staging/") == []
    # nothing the UI shows carries the secret
    shown = []
    for run in inst.get_runs():
        shown.append(json.dumps(run.tags))
        shown += [str(e) for e in inst.all_logs(run.run_id)]
    assert shown and not [s for s in shown if SECRET in s]

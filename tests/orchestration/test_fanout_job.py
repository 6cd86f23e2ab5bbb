"""The batch job of a stateful query fans its process step out per state partition (in process,
ephemeral instance): one `partition` op per partition, join, write, commit; the output equals the
local runner's; a partition op that fails is retried alone (the others ran once); plans that cannot
fan out keep one process op whose description says why; the executor is the query's choice."""
from __future__ import annotations

import datetime as dt
import json
import os

import dagster as dg
import pytest

import increments as inc
from increments import functions as F
from increments.execution import partitioned
from orchestration import build_definitions

PARTS = 3


def _inputs(root: str, files: int = 3) -> str:
    d = os.path.join(root, "in")
    os.makedirs(d, exist_ok=True)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for f in range(files):
        with open(os.path.join(d, f"clicks-{f:03d}.json"), "w") as out:
            for i in range(20):
                t = (t0 + dt.timedelta(minutes=f * 12 + i)).isoformat().replace("+00:00", "Z")
                out.write(json.dumps({"campaign_id": f"c{i % 7}", "event_time": t}) + "\n")
    return d


def _query(root: str, name: str, sliding: bool = False):
    def factory():
        win = F.window("event_time", "10 minutes", "5 minutes") if sliding else F.window("event_time", "10 minutes")
        frame = (inc.read_stream.files(os.path.join(root, "in"), "json", "campaign_id STRING, event_time TIMESTAMP",
                                       max_files_per_trigger=1)
                 .with_watermark("event_time", "5 minutes").group_by(win, "campaign_id").count())
        return (frame.write_stream.format("parquet").output_mode("append").option("state_partitions", PARTS)
                .checkpoint_location(os.path.join(root, "chk", name)).query_name(name)
                .trigger(processing_time="1 minute"))
    factory.__name__ = name
    return factory


def _rows(path: str) -> list:
    t = inc.read.parquet_sink(path)
    return sorted((r["window"]["start"].isoformat(), r["campaign_id"], r["count"]) for r in t.to_pylist())


def _reference(root: str) -> list:
    w = _query(root, "reference")().trigger(available_now=True)
    w.format("parquet").option("path", os.path.join(root, "ref_out")).start().await_termination()
    return _rows(os.path.join(root, "ref_out"))


def _drain(job, inst) -> list[dg.DagsterRun]:
    runs = []
    while True:
        res = job.execute_in_process(instance=inst, raise_on_error=False)
        run = inst.get_run_by_id(res.run_id)
        runs.append(run)
        if run.tags.get("increments/outcome") != "committed":
            return runs


def _steps(inst, run_id: str, event: str) -> list[str]:
    """Step keys of the batch graph's steps, without the graph's node name (`fan.partition[p1]`)."""
    return [e.step_key.split(".", 1)[-1] for e in inst.all_logs(run_id)
            if e.dagster_event and e.dagster_event.event_type_value == event]


def _graph(job, name: str):
    """The sink asset's batch graph inside the job `<name>_batch`."""
    return job.graph.node_dict[name].definition


def test_fanned_out_runs_match_the_local_runner_and_retry_one_partition(tmp_path, monkeypatch):
    root = str(tmp_path)
    _inputs(root)
    expected = _reference(root)
    defs = build_definitions([(_query(root, "fan"), {"path": os.path.join(root, "out"), "retry_delay_s": 0.01,
                                                    "sensor_status": "stopped", "fanout": True})], asset_root=root)
    job = defs.resolve_job_def("fan_batch")
    assert {n.name for n in _graph(job, "fan").node_defs} >= {"fan__read_split", "fan__partition", "fan__join"}
    real, failed = partitioned.process_partition, []

    def flaky(rt, plan, p):                   # partition 1 of batch 1 fails once, after its state commit
        info = real(rt, plan, p)
        if p == 1 and plan.batch_id == 1 and not failed:
            failed.append(p)
            raise OSError("worker lost")
        return info
    monkeypatch.setattr(partitioned, "process_partition", flaky)
    inst = dg.DagsterInstance.ephemeral()
    runs = _drain(job, inst)
    assert [r.tags["increments/outcome"] for r in runs[:-1]] == ["committed"] * (len(runs) - 1)
    assert runs[-1].tags["increments/outcome"] == "idle"
    assert _rows(os.path.join(root, "out")) == expected and expected
    second = runs[1].run_id
    assert _steps(inst, second, "STEP_UP_FOR_RETRY") == ["partition[p1]"]
    ok = _steps(inst, second, "STEP_SUCCESS")
    assert sorted(s for s in ok if s.startswith("partition")) == [f"partition[p{p}]" for p in range(PARTS)]
    assert len(ok) == len(set(ok))            # p0 and p2 ran once; p1 succeeded on its retry


def test_plans_that_cannot_fan_out_keep_one_process_op(tmp_path):
    root = str(tmp_path)
    _inputs(root, 1)
    defs = build_definitions([(_query(root, "slide", sliding=True), {"path": os.path.join(root, "out"),
                                                                     "sensor_status": "stopped", "fanout": True})], asset_root=root)
    job = defs.resolve_job_def("slide_batch")
    process = _graph(job, "slide").node_dict["process"].definition
    assert "Not fanned out per state partition: a sliding window" in process.description
    assert job.execute_in_process().success


def test_executor_is_the_querys_choice(tmp_path):
    root = str(tmp_path)
    q = _query(root, "ex")
    for choice, want in (("in_process", dg.in_process_executor), ("multiprocess", dg.multiprocess_executor)):
        defs = build_definitions([(q, {"executor": choice, "sensor_status": "stopped"})])
        job = defs.resolve_job_def("ex_batch")
        assert job.executor_def is want
        assert ("partition" in _graph(job, "ex").node_dict) == (choice == "multiprocess")   # fan-out by default off in process
    custom = dg.multiprocess_executor.configured({"max_concurrent": 2})   # any ExecutorDefinition (k8s, celery)
    assert build_definitions([(q, {"executor": custom})]).resolve_job_def("ex_batch").executor_def is custom
    with pytest.raises(ValueError, match="executor='threads'"):
        build_definitions([(q, {"executor": "threads"})])


def test_stateless_query_fans_out_over_row_ranges(tmp_path):
    root = str(tmp_path)
    _inputs(root, 2)

    def copy():
        frame = inc.read_stream.files(os.path.join(root, "in"), "json", "campaign_id STRING, event_time TIMESTAMP",
                                      max_files_per_trigger=1).filter("campaign_id <> 'c3'")
        return (frame.write_stream.format("parquet").output_mode("append").option("state_partitions", PARTS)
                .checkpoint_location(os.path.join(root, "chk", "copy")).query_name("copy")
                .trigger(processing_time="1 minute"))
    defs = build_definitions([(copy, {"path": os.path.join(root, "out"), "sensor_status": "stopped", "fanout": True})],
                             asset_root=root)
    job = defs.resolve_job_def("copy_batch")
    inst = dg.DagsterInstance.ephemeral()
    runs = _drain(job, inst)
    assert [r.tags["increments/outcome"] for r in runs] == ["committed", "committed", "idle"]
    assert sorted(s for s in _steps(inst, runs[0].run_id, "STEP_SUCCESS") if s.startswith("partition")) == \
        [f"partition[p{p}]" for p in range(PARTS)]
    got = inc.read.parquet_sink(os.path.join(root, "out")).to_pylist()
    rows = [json.loads(line) for f in sorted(os.listdir(os.path.join(root, "in")))
            for line in open(os.path.join(root, "in", f))]
    assert sorted(r["campaign_id"] + r["event_time"].isoformat() for r in got) == sorted(
        r["campaign_id"] + dt.datetime.fromisoformat(r["event_time"].replace("Z", "+00:00")).isoformat()
        for r in rows if r["campaign_id"] != "c3")

"""A heavy stateful batch spread over processes: ~2M rows into a 1M-key state (group_by(key) with
count and sum, update mode, RocksDB state, 4 partitions), one batch.

    .venv/bin/python bench/scale_out.py [--rows 2000000] [--keys 1000000] [--partitions 4]

Prints, each on a fresh checkpoint of the same input (parquet files):
  1. the batch as a Dagster run, fanned out per state partition (read_split -> partition[p] ->
     join -> write -> commit), with the in_process executor and with the multiprocess executor
     (one process per op): run wall times and their ratio, and the process step's time (split +
     slowest partition) of each;
  2. the local runner (no Dagster) with 1 and with 4 state partitions: batch wall times and ratio.
The multiprocess executor pays a process start and a code-location import per op (~2-3 s each
here); its gain is the partitions running side by side, bounded by the cores (2 on this machine).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.environ.get("INCREMENTS_BENCH_DIR")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def query(checkpoint: str, partitions: int, name: str = "scale_out"):
    import increments as inc
    from increments import functions as F
    frame = inc.read_stream.files(os.path.join(ROOT, "in"), "parquet", "key BIGINT, v BIGINT")
    agg = frame.group_by("key").agg(F.count("v").alias("n"), F.sum("v").alias("total"))
    return (agg.write_stream.foreach_batch(_discard).output_mode("update")
            .option("state_partitions", partitions).checkpoint_location(checkpoint).query_name(name)
            .trigger(processing_time="1 minute"))


def _discard(table, batch_id) -> None:
    """The sink: the output (every key of the batch, update mode) is dropped; the bench is the state."""


def _factory(executor: str):
    def scale_out():
        return query(os.path.join(ROOT, f"chk_{executor}"), int(os.environ["INCREMENTS_BENCH_PARTS"]))
    return scale_out


def job_in_process():
    from orchestration import build_definitions
    return build_definitions([(_factory("in_process"), {"executor": "in_process", "fanout": True,
                                                        "sensor_status": "stopped"})]).get_job_def("scale_out_batch")


def job_multiprocess():
    from orchestration import build_definitions
    return build_definitions([(_factory("multiprocess"), {"executor": "multiprocess",
                                                          "sensor_status": "stopped"})]).get_job_def("scale_out_batch")


def make_input(root: str, rows: int, keys: int, files: int = 8) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    d = os.path.join(root, "in")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    # every key once, the other rows random repeats, shuffled over the files
    k = np.concatenate([np.arange(keys, dtype=np.int64), rng.integers(0, keys, max(rows - keys, 0))])
    rng.shuffle(k)
    per = -(-len(k) // files)
    for f in range(files):
        part = k[f * per:(f + 1) * per]
        pq.write_table(pa.table({"key": part, "v": rng.integers(0, 100, len(part))}),
                       os.path.join(d, f"part-{f:03d}.parquet"))


def dagster_run(fn, instance) -> tuple[float, dict]:
    import dagster as dg
    t0 = time.perf_counter()
    res = dg.execute_job(dg.reconstructable(fn), instance=instance,
                         run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    wall = time.perf_counter() - t0
    assert res.success, res
    run = instance.get_run_by_id(res.run_id)
    assert run.tags.get("increments/outcome") == "committed", run.tags
    return wall, {**commit_info(fn), **partition_span(instance, res.run_id)}


def partition_span(instance, run_id: str) -> dict:
    """The partition ops' phase: from the first one's start to the last one's end, and the sum of
    their own durations (the span is below the sum when they ran side by side)."""
    start, end = {}, {}
    for e in instance.all_logs(run_id):
        ev = e.dagster_event
        if ev is None or not (e.step_key or "").startswith("partition["):
            continue
        if ev.event_type_value == "STEP_START":
            start[e.step_key] = e.timestamp
        elif ev.event_type_value == "STEP_SUCCESS":
            end[e.step_key] = e.timestamp
    return {"span_s": max(end.values()) - min(start.values()),
            "sum_s": sum(end[k] - start[k] for k in end)}


def commit_info(fn) -> dict:
    executor = "in_process" if fn is job_in_process else "multiprocess"
    rt = query(os.path.join(ROOT, f"chk_{executor}"), int(os.environ["INCREMENTS_BENCH_PARTS"])).build()
    try:
        c = rt.log.latest_commit()
        ops = c.extra["state_operators"]
        return {"rows_in": c.num_input_rows, "state_rows": sum(o["num_rows_total"] for o in ops),
                "process_ms": c.durations_ms.get("add_batch", 0), "output_rows": c.num_output_rows}
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


def main() -> None:
    global ROOT
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    own = ROOT is None
    ROOT = ROOT or tempfile.mkdtemp(prefix="increments-scale-out-")
    os.environ["INCREMENTS_BENCH_DIR"] = ROOT
    os.environ["INCREMENTS_BENCH_PARTS"] = str(args.partitions)
    import dagster as dg
    make_input(ROOT, args.rows, args.keys)
    print(f"input: {args.rows:,} rows, {args.keys:,} keys, {args.partitions} state partitions, "
          f"{os.cpu_count()} cores; {ROOT}")
    os.makedirs(os.path.join(ROOT, "dagster_home"), exist_ok=True)
    with dg.DagsterInstance.local_temp(os.path.join(ROOT, "dagster_home")) as inst:
        ip_wall, ip = dagster_run(job_in_process, inst)
        mp_wall, mp = dagster_run(job_multiprocess, inst)
    assert ip["state_rows"] == mp["state_rows"] and ip["output_rows"] == mp["output_rows"], (ip, mp)
    for name, wall, r in (("in_process", ip_wall, ip), ("multiprocess", mp_wall, mp)):
        print(f"Dagster run, {name + ' executor:':23} {wall:7.2f} s; partition ops: {r['span_s']:.2f} s from first "
              f"start to last end, {r['sum_s']:.2f} s summed ({r['rows_in']:,} rows in, {r['state_rows']:,} state rows)")
    print(f"  in_process / multiprocess: run wall {ip_wall / mp_wall:.2f}x, partition phase "
          f"{ip['span_s'] / mp['span_s']:.2f}x")
    l1_wall, l1 = local_run(1)
    l4_wall, l4 = local_run(args.partitions)
    assert l1["state_rows"] == l4["state_rows"] == ip["state_rows"], (l1, l4, ip)
    print(f"local runner, 1 partition:   {l1_wall:6.2f} s (batch {l1['batch_ms'] / 1000:.2f} s)")
    print(f"local runner, {args.partitions} partitions:  {l4_wall:6.2f} s (batch {l4['batch_ms'] / 1000:.2f} s)")
    print(f"  ratio 1 / {args.partitions} partitions: {l1['batch_ms'] / max(l4['batch_ms'], 1):.2f}x")
    if own:
        shutil.rmtree(ROOT, ignore_errors=True)


if __name__ == "__main__":
    main()

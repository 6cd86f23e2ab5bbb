"""Code location of bench/dagster_overhead.py: one small file query, an empty one-op job, an empty
five-op job (Dagster's own floor for a run of five ops: the batch graph's shape, no work), and an
AvailableNow query drained one file per batch (a backfill: its start run queues the first batch)."""
import os

import dagster as dg

import increments as inc
from orchestration import build_definitions

ROOT = os.environ["INCREMENTS_BENCH_DIR"]


def bench_copy():
    return (inc.read_stream.files(os.path.join(ROOT, "landing"), format="json", schema="id BIGINT, name STRING",
                                  max_files_per_trigger=1)
            .write_stream.format("parquet").checkpoint_location(os.path.join(ROOT, "chk"))
            .query_name("bench_copy").trigger(processing_time="1 minute"))


def bench_drain():
    return (inc.read_stream.files(os.path.join(ROOT, "drain_landing"), format="json", schema="id BIGINT, name STRING",
                                  max_files_per_trigger=1)
            .write_stream.format("parquet").checkpoint_location(os.path.join(ROOT, "drain_chk"))
            .query_name("bench_drain").trigger(available_now=True))


@dg.op
def noop():
    return None


@dg.job(executor_def=dg.in_process_executor)
def empty_job():
    noop()


@dg.op
def step(x):
    return x


@dg.job(executor_def=dg.in_process_executor)
def empty5_job():
    step.alias("commit")(step.alias("write")(step.alias("process")(step.alias("read")(noop.alias("plan")()))))


defs = dg.Definitions.merge(
    build_definitions([(bench_copy, {"path": os.path.join(ROOT, "lake"), "sensor_status": "stopped"}),
                       (bench_drain, {"path": os.path.join(ROOT, "drain_lake"), "schedule_status": "stopped"})],
                      asset_root=ROOT),
    dg.Definitions(jobs=[empty_job, empty5_job]))

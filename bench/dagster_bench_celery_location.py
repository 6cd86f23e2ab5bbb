"""Code location of `bench/dagster_overhead.py --celery`: the bench's copy query and empty job
(bench/dagster_bench_location.py), plus two AvailableNow drains of the same shape, one whose runs
carry bench/launcher=default (the default run launcher: a fresh process per batch run) and one
whose runs go to the warm Celery worker (dagster_bench_launcher.py decides by that tag)."""
import os

import dagster as dg

import increments as inc
from orchestration import build_definitions

from dagster_bench_location import bench_copy, empty_job   # bench/ is on the path (dagster_overhead.py)

ROOT = os.environ["INCREMENTS_BENCH_DIR"]
DEFAULT = {"bench/launcher": "default"}


def _drain(name: str):
    def factory():
        return (inc.read_stream.files(os.path.join(ROOT, f"{name}_landing"), format="json",
                                      schema="id BIGINT, name STRING", max_files_per_trigger=1)
                .write_stream.format("parquet").checkpoint_location(os.path.join(ROOT, f"{name}_chk"))
                .query_name(name).trigger(available_now=True))
    factory.__name__ = name
    return factory


defs = dg.Definitions.merge(
    build_definitions([(bench_copy, {"path": os.path.join(ROOT, "lake"), "sensor_status": "stopped"}),
                       (_drain("drain_default"), {"path": os.path.join(ROOT, "drain_default_lake"),
                                                  "schedule_status": "stopped", "extra_tags": DEFAULT}),
                       (_drain("drain_celery"), {"path": os.path.join(ROOT, "drain_celery_lake"),
                                                 "schedule_status": "stopped"})],
                      asset_root=ROOT),
    dg.Definitions(jobs=[empty_job]))

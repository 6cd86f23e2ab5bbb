"""Per-batch overhead of the engine: an empty batch and a one-row batch, beside a plain DuckDB
query over the same one-row Arrow table, measured in this run.

    .venv/bin/python bench/batch_overhead.py [--batches 200] [--log-url postgresql+psycopg://...]

Each batch runs the whole protocol (plan with the write-ahead offsets row, read, process with a
filter + projection, write to the memory sink, commit row), in-process through the five step
functions, on the embedded SQLite log unless --log-url is given.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402

import increments as inc  # noqa: E402
from increments.execution import steps  # noqa: E402
from increments.sql import run_sql  # noqa: E402


def engine_batches(n: int, rows_per_batch: int, log_url: str | None) -> list[float]:
    src = inc.read_stream.memory("id BIGINT, name STRING")
    w = (src.filter("id >= 0").select("id", "upper(name) AS name").write_stream.format("memory")
         .query_name(f"bench_{rows_per_batch}_{time.time_ns()}").checkpoint_location(tempfile.mkdtemp()))
    if log_url:
        w = w.option("log_url", log_url)
    rt = w.build()
    row = [{"id": 1, "name": "x"}] * rows_per_batch
    times = []
    for _ in range(n):
        src.add_data(row)
        t0 = time.perf_counter()
        progress = steps.run_one_batch(rt)
        times.append(time.perf_counter() - t0)
        assert progress is not None and progress["num_input_rows"] == rows_per_batch
    rt.close()
    return times


def duckdb_reference(n: int) -> list[float]:
    table = pa.table({"id": pa.array([1], pa.int64()), "name": ["x"]})
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = run_sql("SELECT id, upper(name) AS name FROM t WHERE id >= 0", {"t": table})
        times.append(time.perf_counter() - t0)
        assert out.num_rows == 1
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--log-url", default=None)
    a = ap.parse_args()
    ref = statistics.median(duckdb_reference(a.batches))
    empty = statistics.median(engine_batches(a.batches, 0, a.log_url))
    one = statistics.median(engine_batches(a.batches, 1, a.log_url))
    backend = "PostgreSQL" if a.log_url else "SQLite (embedded)"
    print(f"per-batch overhead, median of {a.batches} batches, log on {backend}")
    print(f"  plain DuckDB query over the same 1-row Arrow table: {ref * 1000:8.3f} ms")
    print(f"  engine, empty batch (whole protocol):              {empty * 1000:8.3f} ms  ({empty / ref:6.1f}x DuckDB)")
    print(f"  engine, one-row batch (whole protocol):            {one * 1000:8.3f} ms  ({one / ref:6.1f}x DuckDB)")


if __name__ == "__main__":
    main()

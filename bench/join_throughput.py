"""Throughput of a stream-stream inner join, against DuckDB joining the same files in one query.

    .venv/bin/python bench/join_throughput.py [--rows 5000] [--batches 10] [--keys 2000] [--state-store rocksdb]

Workload: impressions and clicks in Parquet files, one file per side per batch, N rows per side per
file; file k covers minutes [k*10, k*10+10) (imps) and the clicks follow their impression by 0-20
minutes. Query: both sides watermarked 10 minutes, `c.ad_id = i.ad_id AND c.click_time BETWEEN
i.imp_time AND i.imp_time + INTERVAL 30 MINUTES`, inner, trigger(available_now=True), foreach_batch
counting the output. Rows/s = input rows (both sides) / wall time of the whole query (including the
trailing no-data batch). Reference: DuckDB's one-shot join of all the files, measured in this run
(same output row count is checked).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import increments as inc  # noqa: E402

COND = "c.ad_id = i.ad_id AND c.click_time BETWEEN i.imp_time AND i.imp_time + INTERVAL 30 MINUTES"


def generate(root: str, rows: int, batches: int, keys: int, seed: int = 7) -> tuple[str, str]:
    rnd = np.random.default_rng(seed)
    idir, cdir = os.path.join(root, "imps"), os.path.join(root, "clicks")
    os.makedirs(idir), os.makedirs(cdir)
    t0 = 1_700_000_000_000_000
    for k in range(batches):
        base = t0 + k * 600_000_000
        it = base + rnd.integers(0, 600_000_000, rows)
        ad = rnd.integers(0, keys, rows)
        pq.write_table(pa.table({"imp_id": [f"i{k}_{j}" for j in range(rows)], "ad_id": ad,
                                 "imp_time": pa.array(it, pa.timestamp("us", tz="UTC"))}),
                       os.path.join(idir, f"{k:04d}.parquet"))
        pick = rnd.integers(0, rows, rows)
        ct = it[pick] + rnd.integers(0, 1_200_000_000, rows)
        pq.write_table(pa.table({"click_id": [f"c{k}_{j}" for j in range(rows)], "ad_id": ad[pick],
                                 "click_time": pa.array(ct, pa.timestamp("us", tz="UTC"))}),
                       os.path.join(cdir, f"{k:04d}.parquet"))
    return idir, cdir


def run_engine(idir: str, cdir: str, store: str) -> tuple[float, int, dict]:
    i = (inc.read_stream.files(idir, "parquet", "imp_id STRING, ad_id BIGINT, imp_time TIMESTAMP",
                               max_files_per_trigger=1).with_watermark("imp_time", "10 minutes").alias("i"))
    c = (inc.read_stream.files(cdir, "parquet", "click_id STRING, ad_id BIGINT, click_time TIMESTAMP",
                               max_files_per_trigger=1).with_watermark("click_time", "10 minutes").alias("c"))
    out = {"rows": 0}

    def sink(table, batch_id):
        out["rows"] += table.num_rows
    chk = tempfile.mkdtemp(prefix="bench-join-chk-")
    t0 = time.perf_counter()
    q = (i.join(c, COND).write_stream.foreach_batch(sink).checkpoint_location(chk)
         .option("state_store", store).trigger(available_now=True).start())
    q.await_termination()
    elapsed = time.perf_counter() - t0
    last = q.last_progress
    shutil.rmtree(chk, ignore_errors=True)
    return elapsed, out["rows"], last


def run_duckdb(idir: str, cdir: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    con = duckdb.connect()
    n = con.sql(f"SELECT count(*) FROM read_parquet('{idir}/*.parquet') AS i JOIN "
                f"read_parquet('{cdir}/*.parquet') AS c ON ({COND})").fetchall()[0][0]
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5000, help="rows per side per batch")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--state-store", default="rocksdb")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-join-")
    try:
        idir, cdir = generate(root, a.rows, a.batches, a.keys)
        total = 2 * a.rows * a.batches
        el, n, last = run_engine(idir, cdir, a.state_store)
        del_el, dn = min((run_duckdb(idir, cdir) for _ in range(3)), key=lambda x: x[0])
        op = next(o for o in last["state_operators"] if o["operator_name"] == "symmetricHashJoin")
        print(f"stream-stream inner join, {a.rows} rows/side/batch x {a.batches} batches, {a.keys} keys, "
              f"state store {a.state_store}")
        print(f"  engine : {el:7.2f} s  {total / el:10,.0f} rows/s  output {n} rows  "
              f"state rows at end {op['num_rows_total']}")
        print(f"  duckdb : {del_el:7.2f} s  {total / del_el:10,.0f} rows/s  output {dn} rows (one-shot join)")
        print(f"  ratio engine/duckdb throughput: {del_el / el:.4f}x" + ("" if n == dn else
              f"  (output differs: {n} vs {dn}; expected when rows arrive behind the watermark)"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

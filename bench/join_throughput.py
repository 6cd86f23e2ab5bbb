"""Throughput of a stream-stream inner join, against DuckDB joining the same files in one query.

    .venv/bin/python bench/join_throughput.py [--rows 5000] [--batches 10] [--keys 2000] [--state-store rocksdb]
                                              [--state-scale 65536,1000000] [--rounds 2]

Workload: impressions and clicks in Parquet files, one file per side per batch, N rows per side per
file; file k covers minutes [k*10, k*10+10) (imps) and the clicks follow their impression by 0-20
minutes. Query: both sides watermarked 10 minutes, `c.ad_id = i.ad_id AND c.click_time BETWEEN
i.imp_time AND i.imp_time + INTERVAL 30 MINUTES`, inner, trigger(available_now=True), foreach_batch
counting the output. Rows/s = input rows (both sides) / wall time of the whole query (including the
trailing no-data batch). Reference: DuckDB's one-shot join of all the files, measured in this run
(same output row count is checked).

State scale (issue 19: join batch time with 1M state rows within 1.5x of 65k): the same query
with 10-day watermarks (nothing is evicted: the rows stay in the state), first load batches that
fill the join state to S rows (both sides together), then 8 measured batches of --rows rows per
side; the ad ids run over (S + half the measured rows)/8 keys and the load's event times over the same 10
minutes, so that a new row finds about as many stored rows with its key (about 4 per side) at every S and each measured batch emits about as many rows. The figures are the
median time of the measured batches (progress trigger_execution) and their median CPU time (the
process's, all threads: less disturbed by other processes on a shared machine) at each S, the
rounds alternating the sizes; the ratios are against the smallest S.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
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


def generate_scale(root: str, state_rows: int, rows: int, measured: int = 5, load_rows: int = 50_000,
                   seed: int = 11) -> tuple[str, str, int]:
    """Load files (names 0000..) that put `state_rows` rows into the join state, then `measured`
    files of `rows` rows per side (names 1000..); returns (imps dir, clicks dir, load batches)."""
    rnd = np.random.default_rng(seed)
    idir, cdir = os.path.join(root, "imps"), os.path.join(root, "clicks")
    os.makedirs(idir), os.makedirs(cdir)
    keys = max(1, (state_rows + rows * measured) // 8)      # the mean state over the measured batches / 8
    per_side = state_rows // 2
    sizes = [load_rows] * (per_side // load_rows) + ([per_side % load_rows] if per_side % load_rows else [])
    t0 = 1_700_000_000_000_000
    files = [(f"{k:04d}", n) for k, n in enumerate(sizes)] + [(f"{1000 + k:04d}", rows) for k in range(measured)]
    for k, (name, n) in enumerate(files):
        # the load's rows spread over the same 10 minutes at every size, then a measured file per minute
        # (the watermark moves, nothing is evicted)
        if k < len(sizes):
            it = t0 + rnd.integers(0, 600_000_000, n)
        else:
            it = t0 + (10 + k - len(sizes)) * 60_000_000 + rnd.integers(0, 60_000_000, n)
        ad = rnd.integers(0, keys, n)
        pq.write_table(pa.table({"imp_id": [f"i{k}_{j}" for j in range(n)], "ad_id": ad,
                                 "imp_time": pa.array(it, pa.timestamp("us", tz="UTC"))}),
                       os.path.join(idir, f"{name}.parquet"))
        ct = it + rnd.integers(0, 1_200_000_000, n)
        pq.write_table(pa.table({"click_id": [f"c{k}_{j}" for j in range(n)], "ad_id": rnd.integers(0, keys, n),
                                 "click_time": pa.array(ct, pa.timestamp("us", tz="UTC"))}),
                       os.path.join(cdir, f"{name}.parquet"))
    return idir, cdir, len(sizes)


class _CpuClock:
    """A query listener: the process's CPU time (all threads) when each batch's progress is reported."""

    def __init__(self):
        self.at: dict[int, float] = {}
        self.start = time.process_time()

    def on_query_started(self, event):
        self.start = time.process_time()

    def on_query_progress(self, progress):
        self.at[progress["batch_id"]] = time.process_time()

    def on_query_terminated(self, event):
        pass

    def on_batch_step(self, *a):
        pass


def run_scale(idir: str, cdir: str, loads: int, store: str) -> tuple[float, float, int, int]:
    """(median trigger_execution ms and median CPU ms of the batches after the load, state rows
    before them, output rows of them)."""
    i = (inc.read_stream.files(idir, "parquet", "imp_id STRING, ad_id BIGINT, imp_time TIMESTAMP",
                               max_files_per_trigger=1).with_watermark("imp_time", "10 days").alias("i"))
    c = (inc.read_stream.files(cdir, "parquet", "click_id STRING, ad_id BIGINT, click_time TIMESTAMP",
                               max_files_per_trigger=1).with_watermark("click_time", "10 days").alias("c"))
    out: dict[int, int] = {}

    def sink(table, batch_id):
        out[batch_id] = out.get(batch_id, 0) + table.num_rows
    chk = tempfile.mkdtemp(prefix="bench-join-scale-chk-")
    clock = _CpuClock()
    try:
        q = (i.join(c, COND).write_stream.foreach_batch(sink).checkpoint_location(chk)
             .option("state_store", store).trigger(available_now=True).listener(clock).start())
        q.await_termination()
        if q.exception() is not None:
            raise q.exception()
        prog = [p for p in q.recent_progress if p["num_input_rows"]]
        measured = prog[loads:]
        state = next(o for o in prog[loads - 1]["state_operators"] if o["operator_name"] == "symmetricHashJoin")
        times = [p["duration_ms"]["trigger_execution"] for p in measured]
        cpu = [(clock.at[p["batch_id"]] - clock.at[p["batch_id"] - 1]) * 1000 for p in measured]
        return (statistics.median(times), statistics.median(cpu), state["num_rows_total"],
                sum(out.get(p["batch_id"], 0) for p in measured))
    finally:
        shutil.rmtree(chk, ignore_errors=True)


def state_scale(sizes: list[int], rows: int, store: str, rounds: int, measured: int = 8) -> None:
    root = tempfile.mkdtemp(prefix="bench-join-scale-")
    try:
        data = {s: generate_scale(os.path.join(root, str(s)), s, rows, measured) for s in sizes}
        got: dict[int, list[tuple[float, float]]] = {s: [] for s in sizes}
        info: dict[int, tuple[int, int]] = {}
        for _ in range(rounds):
            for s in sizes:
                ms, cpu, state, outn = run_scale(*data[s], store)
                got[s].append((ms, cpu))
                info[s] = (state, outn)
        base = statistics.median(x[0] for x in got[sizes[0]])
        base_cpu = statistics.median(x[1] for x in got[sizes[0]])
        print(f"join batch time vs join state size ({rows} rows/side/batch, {measured} batches each, median of {rounds} "
              f"rounds, state store {store}; CPU = the process's CPU time per batch, all threads)")
        for s in sizes:
            m = statistics.median(x[0] for x in got[s])
            cpu = statistics.median(x[1] for x in got[s])
            print(f"  state {info[s][0]:>9,} rows: {m:7.1f} ms/batch ({m / base:.2f}x)   CPU {cpu:7.1f} ms/batch "
                  f"({cpu / base_cpu:.2f}x)   output {info[s][1]:,} rows" + ("   target <= 1.5x" if s != sizes[0] else ""))
    finally:
        shutil.rmtree(root, ignore_errors=True)


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
    ap.add_argument("--state-scale", default="65536,1000000",
                    help="join state sizes (rows) for the batch-time-vs-state measure; '' to skip it")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the state-scale measure")
    ap.add_argument("--only-scale", action="store_true")
    a = ap.parse_args()
    if a.state_scale:
        state_scale([int(x) for x in a.state_scale.split(",")], a.rows, a.state_store, a.rounds)
    if a.only_scale:
        return
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

"""Python UDFs against the same logic as a SQL expression, and the design choice behind them.

    .venv/bin/python bench/udf_vs_sql.py [--rows 1000000] [--batches 4] [--rounds 3]

Part 1, the engine (one run, same files, same machine): a stream of Parquet files (one per batch,
--rows rows each: k STRING, v BIGINT, ts TIMESTAMP) through
    with_column("c", <expr>) -> filter("c > 100") -> with_watermark -> group_by(window, k).agg(sum(c))
where <expr> is the SQL `CASE WHEN v % 3 = 0 THEN v * 2.5::DOUBLE ELSE v + 1.0::DOUBLE END`, or the same logic as
an arrow UDF (pyarrow.compute), a pandas UDF (numpy.where) and a row UDF (Python per row).
Rows/s = input rows / wall time of the whole query (trailing no-data batch included); the ratio
printed is each UDF's time over the SQL expression's (median of --rounds, interleaved).

Part 2, the design (increments/udf.py evaluates UDFs on Arrow between DuckDB stages rather than
registering them in DuckDB): the same computation over one in-memory table of --rows rows, in one
process, (a) SQL only; (b) split: SQL computes the argument, the function runs on the Arrow column,
SQL continues (what the engine does); (c) the function registered in DuckDB with
create_function(type="arrow") (vectorized, DuckDB calls it per chunk of 2048 rows); (d) registered
as a native (row-at-a-time) Python function. Ratios are over (a).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402

SQL = "CASE WHEN v % 3 = 0 THEN v * 2.5::DOUBLE ELSE v + 1.0::DOUBLE END"


def arrow_logic(v: pa.Array) -> pa.Array:
    mult = pc.equal(pc.subtract(v, pc.multiply(pc.divide(v, 3), 3)), 0)     # v % 3 = 0 (v >= 0)
    vf = pc.cast(v, pa.float64())
    return pc.if_else(mult, pc.multiply(vf, 2.5), pc.add(vf, 1.0))


def numpy_logic(arr: np.ndarray) -> np.ndarray:
    return np.where(arr % 3 == 0, arr * 2.5, arr + 1.0)


def pandas_logic(v):
    import pandas as pd
    return pd.Series(numpy_logic(v.to_numpy()))


def row_logic(v):
    return v * 2.5 if v % 3 == 0 else v + 1.0


def generate(root: str, rows: int, batches: int) -> str:
    rnd = np.random.default_rng(3)
    t0 = 1_700_000_000_000_000
    for b in range(batches):
        ts = t0 + b * 600_000_000 + rnd.integers(0, 600_000_000, rows)
        pq.write_table(pa.table({"k": pa.array(rnd.integers(0, 50, rows).astype(str)),
                                 "v": pa.array(rnd.integers(0, 1000, rows)),
                                 "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}),
                       os.path.join(root, f"{b:04d}.parquet"))
    return root


def run_query(data: str, kind: str, work: str) -> tuple[float, int]:
    src = inc.read_stream.files(data, "parquet", "k STRING, v BIGINT, ts TIMESTAMP", max_files_per_trigger=1)
    expr = {"sql": SQL, "arrow": F.arrow_udf(arrow_logic, "double")("v"),
            "pandas": F.pandas_udf(pandas_logic, "double")("v"), "row": F.udf(row_logic, "double")("v")}[kind]
    out = (src.with_column("c", expr).filter("c > 100").with_watermark("ts", "10 minutes")
           .group_by(F.window("ts", "10 minutes"), "k").agg(F.sum("c").alias("total")))
    total = [0]
    name = f"bench_udf_{kind}_{uuid.uuid4().hex[:6]}"
    t = time.perf_counter()
    q = (out.write_stream.foreach_batch(lambda tbl, bid: total.__setitem__(0, total[0] + tbl.num_rows))
         .query_name(name).option("state_store", "memory").trigger(available_now=True)
         .checkpoint_location(os.path.join(work, name)).start())
    q.await_termination()
    return time.perf_counter() - t, total[0]


def part1(rows: int, batches: int, rounds: int) -> None:
    root = tempfile.mkdtemp(prefix="udf_bench_")
    try:
        data = os.path.join(root, "data")
        os.makedirs(data)
        generate(data, rows, batches)
        kinds = ["sql", "arrow", "pandas", "row"]
        times: dict[str, list[float]] = {k: [] for k in kinds}
        outs: dict[str, int] = {}
        run_query(data, "sql", root)            # warm up (imports, DuckDB)
        for _ in range(rounds):
            for k in kinds:
                dt, n = run_query(data, k, root)
                times[k].append(dt)
                outs[k] = n
        assert len(set(outs.values())) == 1, outs
        n_in = rows * batches
        base = statistics.median(times["sql"])
        print(f"part 1: {n_in:,} input rows in {batches} batches, {outs['sql']} output rows each way")
        for k in kinds:
            m = statistics.median(times[k])
            print(f"  {k:>6}: {m:7.3f} s  {n_in / m:12,.0f} rows/s  ratio to SQL {m / base:5.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def part2(rows: int, rounds: int) -> None:
    rnd = np.random.default_rng(5)
    table = pa.table({"k": pa.array(rnd.integers(0, 50, rows).astype(str)), "v": pa.array(rnd.integers(0, 1000, rows))})
    con = duckdb.connect()
    con.register("t", table)

    def arrow_fn(v):
        return arrow_logic(v if isinstance(v, pa.Array) else v.combine_chunks())
    con.create_function("f_arrow", arrow_fn, [duckdb.sqltype("BIGINT")], duckdb.sqltype("DOUBLE"), type="arrow")
    con.create_function("f_native", row_logic, [duckdb.sqltype("BIGINT")], duckdb.sqltype("DOUBLE"), type="native")
    tail = "SELECT k, sum(c) AS total FROM {} WHERE c > 100 GROUP BY k ORDER BY k"

    def sql_only():
        return con.sql(tail.format(f"(SELECT k, {SQL} AS c FROM t)")).to_arrow_table()

    def split():
        args = con.sql("SELECT k, v + 0 AS a FROM t").to_arrow_table()
        res = arrow_logic(args.column("a").combine_chunks())
        mid = pa.table({"k": args.column("k"), "c": res})
        con.register("mid", mid)
        try:
            return con.sql(tail.format("mid")).to_arrow_table()
        finally:
            con.unregister("mid")

    def in_duckdb_arrow():
        return con.sql(tail.format("(SELECT k, f_arrow(v + 0) AS c FROM t)")).to_arrow_table()

    def in_duckdb_native():
        return con.sql(tail.format("(SELECT k, f_native(v + 0) AS c FROM t)")).to_arrow_table()
    ways = {"SQL only": sql_only, "split (engine)": split, "DuckDB arrow UDF": in_duckdb_arrow,
            "DuckDB native UDF": in_duckdb_native}
    ref = sql_only()
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(rounds):
        for k, fn in ways.items():
            t = time.perf_counter()
            out = fn()
            times[k].append(time.perf_counter() - t)
            assert out.column("k").equals(ref.column("k")) and np.allclose(out.column("total").to_numpy(),
                                                                           ref.column("total").to_numpy()), k
    base = statistics.median(times["SQL only"])
    print(f"part 2: {rows:,} rows in one table, the same result each way")
    for k in ways:
        m = statistics.median(times[k])
        print(f"  {k:>18}: {m:7.3f} s  ratio to SQL {m / base:6.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--part", choices=["1", "2", "both"], default="both")
    a = ap.parse_args()
    if a.part in ("1", "both"):
        part1(a.rows, a.batches, a.rounds)
    if a.part in ("2", "both"):
        part2(a.rows, a.rounds)


if __name__ == "__main__":
    main()

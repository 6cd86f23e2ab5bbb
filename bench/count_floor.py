"""The floor of a high-cardinality count batch on the memory store (issue 33 item 3): the per-key work
the state store's contract requires, timed alone, against DuckDB's one-shot GROUP BY in the same
command, on the same Parquet files as high_cardinality.py (2M rows into 1M keys).

    .venv/bin/python bench/count_floor.py [--rows 2000000] [--keys 1000000] [--rounds 3]

The contract per group (state/base.py, state/files.py, operators/partitioning.py): a state key of
encode_key's bytes (one Python bytes object: the store's dict is keyed by them), a value of
encode_value's bytes (the count, pickled), the partition by md5 of the key's text (the checkpoint's
partitioning), a lookup of the key (multi_get: the merge with the state) and a dict insert (put),
and the changelog row (an Arrow IPC file of the key and value bytes). Each step is timed alone on
the groups DuckDB computed (thread CPU seconds, best of the rounds); the sum is the floor an engine
keeping this contract pays beyond the GROUP BY itself. Prints each step, the sum, DuckDB's GROUP BY,
and the engine's whole count batch (high_cardinality.run_engine, memory store) beside them.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def best(f, rounds: int) -> tuple[float, float, object]:
    """(best thread CPU s, best wall s, last result) of f() over the rounds."""
    cpu = wall = float("inf")
    out = None
    for _ in range(rounds):
        c0, t0 = time.thread_time(), time.perf_counter()
        out = f()
        cpu, wall = min(cpu, time.thread_time() - c0), min(wall, time.perf_counter() - t0)
    return cpu, wall, out


def main() -> None:
    import high_cardinality as hc

    from increments.operators.partitioning import partition_ids
    from increments.sql import duckdb_connection
    from state import files
    from state.columnar import encode_keys
    from state.columnar_values import encode_values

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=os.environ.get("INCREMENTS_BENCH_DIR") or tempfile.gettempdir())
    a = ap.parse_args()
    path = hc.generate(a.dir, a.rows, a.keys, 4, "bigint")
    con = duckdb_connection()
    sql = f"SELECT k, count(*) AS count FROM read_parquet('{path}/*.parquet') GROUP BY k"
    load = "load {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())
    print(f"count floor: {a.rows:,} rows into {a.keys:,} keys, memory store's per-key contract   ({load})")
    _, d_wall, groups = best(lambda: con.sql(sql).to_arrow_table(), a.rounds)
    # DuckDB's own threads: its process CPU is what high_cardinality.py reports; thread CPU misses them
    c0 = time.process_time()
    con.sql(sql).to_arrow_table()
    d_proc = time.process_time() - c0
    k, cnt = groups.column("k"), groups.column("count")
    steps = []

    def step(name, f):
        cpu, wall, out = best(f, a.rounds)
        steps.append((name, cpu))
        print(f"  {name:46s} cpu {cpu * 1e3:7.1f} ms   wall {wall * 1e3:7.1f} ms")
        return out

    step("partition ids (md5 of each key's text)", lambda: partition_ids(groups, ["k"], 2))
    keys = step("state keys (encode_keys -> bytes objects)", lambda: encode_keys([k]))
    values = step("state values (encode_values of the counts)", lambda: encode_values([cnt]))
    data: dict = {}
    step("lookup of each key (multi_get, empty store)", lambda: list(map(data.get, keys)))

    def insert():
        data.clear()
        data.update(zip(keys, values))
    step("insert of each key (dict update)", insert)
    step("changelog (Arrow IPC of keys and values)", lambda: files.encode_rows(keys, values, {"rows": len(keys)}))
    floor = sum(c for _, c in steps)
    print(f"  {'sum: the floor beyond the GROUP BY':46s} cpu {floor * 1e3:7.1f} ms")
    print(f"duckdb one-shot GROUP BY k: wall {d_wall:.3f} s, process cpu {d_proc:.3f} s (all its threads)   "
          f"(load {os.getloadavg()[0]:.1f}/{os.getloadavg()[1]:.1f}/{os.getloadavg()[2]:.1f})")
    warm = hc.generate(a.dir, 2000, 1000, 1, "bigint")
    hc.run_engine(warm, "count", "memory", "bigint")
    e = min((hc.run_engine(path, "count", "memory", "bigint")[0], hc.run_engine.cpu) for _ in range(2))
    print(f"engine count, memory store: wall {e[0]:.2f} s, cpu {e[1]:.2f} s   "
          f"(load {os.getloadavg()[0]:.1f}/{os.getloadavg()[1]:.1f}/{os.getloadavg()[2]:.1f})")
    print(f"floor alone / DuckDB wall: {floor / d_wall:.1f}x; (DuckDB wall + floor) / DuckDB wall: "
          f"{(d_wall + floor) / d_wall:.1f}x (target 4x); engine / DuckDB wall: {e[0] / d_wall:.1f}x; "
          f"engine / (DuckDB + floor): {e[0] / (d_wall + floor):.2f}x")


if __name__ == "__main__":
    main()

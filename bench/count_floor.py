"""The floor of a high-cardinality count batch on the memory store (issue 33 item 3): the per-key work
the state store's contract requires, timed alone, against DuckDB's one-shot GROUP BY in the same
command, on the same Parquet files as high_cardinality.py (2M rows into 1M keys).

    .venv/bin/python bench/count_floor.py [--rows 2000000] [--keys 1000000] [--rounds 3]

The contract per group (state/base.py, state/files.py, operators/partitioning.py), for a batch whose
groups are all new (the first batch): the partition by md5 of the key's text (the checkpoint's
partitioning; DuckDB's md5_number on all its threads), the state key (encode_key's bytes, as one
Arrow array), the value (the count pickled, as one Arrow array), the changelog (an Arrow IPC file of
keys and values, written and fsynced). The memory store keeps the arrays (state.memory_runs): no
lookup (an empty store) and no dict insert in that batch. A later batch of as many keys looks them up
in those arrays (Arrow's index_in) and replaces their rows; a batch small against them moves them into
the dict (a Python bytes object and a dict entry per key): both printed below the floor. Each
step is timed alone on the groups DuckDB computed (process CPU seconds: DuckDB's threads count;
best of the rounds). Prints each step, the sum, DuckDB's GROUP BY, and the engine's whole count
batch (high_cardinality.run_engine, memory store) beside them.
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
    """(best process CPU s, best wall s, last result) of f() over the rounds."""
    cpu = wall = float("inf")
    out = None
    for _ in range(rounds):
        c0, t0 = time.process_time(), time.perf_counter()
        out = f()
        cpu, wall = min(cpu, time.process_time() - c0), min(wall, time.perf_counter() - t0)
    return cpu, wall, out


def main() -> None:
    import high_cardinality as hc

    from increments.operators.partitioning import partition_ids
    from increments.sql import duckdb_connection
    from state import files
    from state.columnar import encode_key_array
    from state.columnar_values import encode_value_array

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

    def step(name, f, floor=True):
        cpu, wall, out = best(f, a.rounds)
        if floor:
            steps.append((name, cpu))
        print(f"  {name:54s} cpu {cpu * 1e3:7.1f} ms   wall {wall * 1e3:7.1f} ms")
        return out

    step("partition ids (md5 of each key's text, DuckDB)", lambda: partition_ids(groups, ["k"], 2))
    keys = step("state keys (encode_key_array)", lambda: encode_key_array([k]))
    values = step("state values (encode_value_array of the counts)", lambda: encode_value_array([cnt]))
    loc = files.location(tempfile.mkdtemp(prefix="count-floor-"))
    n_put = [0]

    def changelog():
        n_put[0] += 1
        files.put(loc, f"{n_put[0]}.delta", files.encode_rows(keys, values, {"rows": len(keys)}))
    step("changelog (Arrow IPC of keys and values, fsynced)", changelog)
    floor = sum(c for _, c in steps)
    print(f"  {'sum: the floor beyond the GROUP BY':54s} cpu {floor * 1e3:7.1f} ms")
    print("  later batches, per key read back (not in the floor above):")
    from state import memory_runs as mr
    run = [(keys, values, False)]
    at = step("    a batch of them against the kept arrays: lookup (index_in)", lambda: mr.lookup(run, keys)[0], False)
    step("    ... and the put: the old rows dropped from the arrays", lambda: mr.drop_rows(run, at), False)
    print("  the same through the dict (a batch small against the kept arrays moves them there):")
    klist = step("    the keys as Python bytes objects (to_pylist)", lambda: keys.to_pylist(), False)
    vlist = values.to_pylist()
    data: dict = {}

    def insert():
        data.clear()
        data.update(zip(klist, vlist))
    step("    the dict of them (the memory store's keyed form)", insert, False)
    step("    a lookup of each key (multi_get)", lambda: list(map(data.get, klist)), False)
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

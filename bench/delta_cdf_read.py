"""The Delta change data feed read two ways, same table, same process, alternating rounds:
deltalake's own DeltaTable.load_cdf(starting_version=0) (DataFusion) against increments'
read_stream.delta(read_change_feed=True) reader (the commit JSONs and _change_data/ files through
increments.storage, decoded by pyarrow), both producing every change of every version as Arrow.

Then the exit check: a fresh interpreter that reads the feed and exits, N times per reader; any
run that does not exit 0 (SIGABRT at exit is what DeltaTable.to_pyarrow_table does about one exit
in six here, see sinks/delta.py read_table) is counted.

    python bench/delta_cdf_read.py [--versions 200] [--rows 2000] [--rounds 5] [--exits 12]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = """
import sys
sys.path.insert(0, {root!r})
import pyarrow as pa
if sys.argv[1] == "load_cdf":
    from deltalake import DeltaTable
    t = pa.table(DeltaTable({path!r}).load_cdf(starting_version=0).read_all())
else:
    from increments.sources.delta_changes import DeltaChangeFeedSource
    s = DeltaChangeFeedSource({path!r}, starting_version=0)
    t = s.read({{"version": -1}}, {{"version": s._latest_version()}})
assert t.num_rows > 0
"""


def build(path: str, versions: int, rows: int) -> int:
    from deltalake import DeltaTable, write_deltalake
    write_deltalake(path, pa.table({"id": pa.array(range(rows), pa.int64()), "v": ["x"] * rows}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    n = rows
    for v in range(1, versions):
        if v % 2:
            write_deltalake(path, pa.table({"id": pa.array(range(n, n + rows), pa.int64()), "v": ["a"] * rows}),
                            mode="append")
            n += rows
        else:
            ids = list(range(v, n, max(n // 100, 1)))[:100]
            (DeltaTable(path).merge(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"u{v}"] * len(ids)}),
                                    "t.id = s.id", source_alias="s", target_alias="t")
             .when_matched_update_all().execute())
    return DeltaTable(path).version()


def read_load_cdf(path: str) -> pa.Table:
    from deltalake import DeltaTable
    return pa.table(DeltaTable(path).load_cdf(starting_version=0).read_all())


def read_increments(path: str, latest: int) -> pa.Table:
    from increments.sources.delta_changes import DeltaChangeFeedSource
    s = DeltaChangeFeedSource(path, starting_version=0)       # fresh: no cached log entries
    return s.read({"version": -1}, {"version": latest})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--versions", type=int, default=200)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--exits", type=int, default=12)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t")
        latest = build(path, a.versions, a.rows)
        ref, ours = read_load_cdf(path), read_increments(path, latest)
        assert ref.num_rows == ours.num_rows, (ref.num_rows, ours.num_rows)
        times: dict[str, list[float]] = {"load_cdf": [], "increments": []}
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            read_load_cdf(path)
            times["load_cdf"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            read_increments(path, latest)
            times["increments"].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{latest + 1} versions, {ours.num_rows} change rows")
        print(f"load_cdf    median {med['load_cdf'] * 1000:.0f} ms")
        print(f"increments  median {med['increments'] * 1000:.0f} ms  "
              f"({med['load_cdf'] / med['increments']:.2f}x the speed of load_cdf)")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = CHILD.format(root=root, path=path)
        for reader in ("load_cdf", "increments"):
            bad = [p.returncode for p in (subprocess.run([sys.executable, "-c", code, reader], capture_output=True)
                                          for _ in range(a.exits)) if p.returncode != 0]
            print(f"exit check {reader}: {a.exits - len(bad)}/{a.exits} exited 0" + (f", others {bad}" if bad else ""))


if __name__ == "__main__":
    main()

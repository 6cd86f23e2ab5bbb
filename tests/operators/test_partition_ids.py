"""partitioning.partition_ids: DuckDB's path (many rows) against the row-by-row md5 (a few rows)."""
import numpy as np
import pyarrow as pa

from increments.operators import partitioning


def test_partition_ids_are_the_same_either_way(monkeypatch):
    rng = np.random.default_rng(3)
    t = pa.table({"k": pa.array(rng.integers(-10 ** 18, 10 ** 18, 5000)),
                  "s": pa.array([f"event-{x}" for x in rng.integers(0, 10 ** 9, 4990)] + ["", "a" * 80, "é", None,
                                                                                         "x\x00y", "\\N", "a\x1fb",
                                                                                         "z" * 56, "日本", "-0"]),
                  "u": pa.array(rng.integers(0, 2 ** 63, 5000).astype(np.uint64) * np.uint64(2), pa.uint64())})
    for cols in (["k"], ["s"], ["k", "s"], ["u", "s"]):
        for n in (2, 3, 200, 2 ** 31 - 1):
            many = partitioning.partition_ids(t, cols, n)                 # 5000 rows: DuckDB
            monkeypatch.setattr(partitioning, "_DUCKDB_MIN", 10 ** 9)
            few = partitioning.partition_ids(t, cols, n)                  # row by row
            monkeypatch.setattr(partitioning, "_DUCKDB_MIN", 2048)
            assert many.equals(few)

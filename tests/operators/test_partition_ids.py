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


def test_split_by_partition_either_way(monkeypatch):
    """A filter per partition (a few partitions) and the stable sort give the same tables."""
    rng = np.random.default_rng(4)
    for n in (1, 2, 3, 4, 7):
        t = pa.table({"k": pa.array(rng.integers(0, 100, 3000)), "__p": pa.array(rng.integers(0, n, 3000).astype(np.int32))})
        t = pa.concat_tables([t.slice(0, 1000), t.slice(1000)])                     # two chunks
        got = partitioning.split_by_partition(t, n)
        monkeypatch.setattr(partitioning, "_FILTER_MAX", 0)
        sorted_way = partitioning.split_by_partition(t, n)
        monkeypatch.setattr(partitioning, "_FILTER_MAX", 4)
        assert len(got) == len(sorted_way) == n
        assert all(a.equals(b) for a, b in zip(got, sorted_way))
        assert [x.num_rows for x in got] == [int((t.column("__p").to_numpy() == i).sum()) for i in range(n)]


def test_partition_ids_of_a_few_rows_by_python_equal_arrows_and_duckdbs(monkeypatch):
    """Up to _PYTHON_MAX rows the key texts are built in Python: the same ids as the Arrow path and as
    DuckDB's, for integers of every width and sign, strings (empty, non-ASCII, the separator), and NULLs."""
    rng = np.random.default_rng(5)
    n = partitioning._PYTHON_MAX
    t = pa.table({"k": pa.array([int(x) for x in rng.integers(-10 ** 15, 10 ** 15, n - 4)] + [None, 0, -1, 2 ** 62]),
                  "i8": pa.array([int(x) for x in rng.integers(-128, 128, n)], pa.int8()),
                  "u": pa.array([2 ** 64 - 1, 2 ** 63, None] + [int(x) for x in rng.integers(0, 1000, n - 3)], pa.uint64()),
                  "s": pa.array(["", "é", None, "a\x1fb"] + [f"event-{x}" for x in rng.integers(0, 10 ** 9, n - 4)]),
                  "ls": pa.array(["x", None] + [f"c{x}" for x in rng.integers(0, 9, n - 2)], pa.large_string())})
    for cols in (["k"], ["s"], ["k", "s"], ["i8", "u", "ls"], ["u"]):
        for parts in (2, 3, 200):
            for rows in (1, 7, n):
                few = t.slice(0, rows)
                python = partitioning.partition_ids(few, cols, parts)
                monkeypatch.setattr(partitioning, "_PYTHON_MAX", 0)
                arrow = partitioning.partition_ids(few, cols, parts)
                monkeypatch.setattr(partitioning, "_DUCKDB_MIN", 0)
                duckdb = partitioning.partition_ids(few, cols, parts)
                monkeypatch.setattr(partitioning, "_PYTHON_MAX", n)
                monkeypatch.setattr(partitioning, "_DUCKDB_MIN", 2048)
                assert python.equals(arrow) and python.equals(duckdb), (cols, parts, rows)

"""Tumbling and sliding window aggregation, batch for batch as SEMANTICS.md (rules 1-6) says.

The data puts rows on window boundaries (10:05:00 belongs to [10:05, 10:10)), 1 s either side
(10:04:59), exactly at/inside the (W_{b-1}, W_b] band and very late; expected values were
derived from the rules (not recorded on Spark: no recorder in docs/spark/; recorded windowed
aggregations: tests/operators/chain_spark_expected.py, by docs/spark/record_chain.py).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import increments as inc
from increments import functions as F
from agg_testutil import STORES, metrics, row as r, run, watermarks, write_files

WA = [[r("a", "10:00:00", 1), r("a", "10:04:59", 2), r("b", "10:05:00", 3), r("a", "10:12:00", 4)],
      [r("a", "10:02:00", 5), r("b", "10:07:00", 6), r("a", "10:26:00", 7)],
      # WL = 10:02, W = 10:16: a@10:01:59 is in window [10:00,10:05) whose end 10:05 > WL -> kept,
      # and the window closes (end <= W) in this same batch
      [r("a", "10:01:59", 8), r("a", "10:04:00", 9), r("b", "10:03:00", 1), r("b", "10:09:59", 2), r("a", "10:15:00", 3),
       r("a", "10:40:00", 1)],
      # WL = 10:16: a@10:14:59 (window end 10:15) is late; b@10:15:00 (end 10:20) is not
      [r("a", "10:14:59", 2), r("b", "10:15:00", 3), r("a", "10:30:00", 4), r("a", "10:29:59", 5), r("c", "10:20:01", 6)],
      [r("a", "11:00:00", 1)]]
WMS = ["epoch", "10:02", "10:16", "10:30", "10:30", "10:50"]


def tumbling(df):
    return df.with_watermark("ts", "10 minutes").group_by(F.window("ts", "5 minutes"), "id").agg(F.count(), F.sum("v"))


def sliding(df):
    return df.with_watermark("ts", "10 minutes").group_by(F.window("ts", "10 minutes", "5 minutes")).count()


W = lambda a, b: (a, b)  # noqa: E731


@pytest.mark.parametrize("store", STORES)
def test_tumbling_append(tmp_path, store):
    out, prog, chk = run(tmp_path, WA, tumbling, "append", store)
    assert out == {
        0: [], 1: [],
        2: [(W("10:00", "10:05"), "a", 5, 25), (W("10:00", "10:05"), "b", 1, 1), (W("10:05", "10:10"), "b", 3, 11),
            (W("10:10", "10:15"), "a", 1, 4)],
        3: [(W("10:15", "10:20"), "a", 1, 3), (W("10:15", "10:20"), "b", 1, 3), (W("10:20", "10:25"), "c", 1, 6),
            (W("10:25", "10:30"), "a", 2, 12)],
        4: [],
        5: [(W("10:30", "10:35"), "a", 1, 4), (W("10:40", "10:45"), "a", 1, 1)]}   # the trailing no-data batch
    assert watermarks(prog) == WMS
    assert metrics(prog) == [(3, 3, 0, 0), (4, 3, 0, 0), (3, 5, 4, 0), (2, 4, 4, 1), (3, 1, 0, 0), (1, 0, 2, 0)]
    assert [p["num_input_rows"] for p in prog] == [4, 3, 6, 5, 1, 0]
    assert prog[0]["state_operators"][0]["operator_name"] == "stateStoreSave"
    assert all(p["state_operators"][0]["memory_used_bytes"] > 0 for p in prog)
    state = inc.read_state(chk, operator="0")
    assert state.num_rows == 1 and state.column("id").to_pylist() == ["a"]
    assert state.column("count").to_pylist() == [1] and state.column("sum(v)").to_pylist() == [1]


@pytest.mark.parametrize("store", STORES)
def test_tumbling_update(tmp_path, store):
    out, prog, _ = run(tmp_path, WA, tumbling, "update", store)
    assert out == {
        0: [(W("10:00", "10:05"), "a", 2, 3), (W("10:05", "10:10"), "b", 1, 3), (W("10:10", "10:15"), "a", 1, 4)],
        1: [(W("10:00", "10:05"), "a", 3, 8), (W("10:05", "10:10"), "b", 2, 9), (W("10:25", "10:30"), "a", 1, 7)],
        2: [(W("10:00", "10:05"), "a", 5, 25), (W("10:00", "10:05"), "b", 1, 1), (W("10:05", "10:10"), "b", 3, 11),
            (W("10:15", "10:20"), "a", 1, 3), (W("10:40", "10:45"), "a", 1, 1)],
        3: [(W("10:15", "10:20"), "b", 1, 3), (W("10:20", "10:25"), "c", 1, 6), (W("10:25", "10:30"), "a", 2, 12),
            (W("10:30", "10:35"), "a", 1, 4)],
        4: [(W("11:00", "11:05"), "a", 1, 1)],
        5: []}
    assert watermarks(prog) == WMS
    assert metrics(prog) == [(3, 3, 0, 0), (4, 3, 0, 0), (3, 5, 4, 0), (2, 4, 4, 1), (3, 1, 0, 0), (1, 0, 2, 0)]


@pytest.mark.parametrize("store", STORES)
def test_tumbling_complete_keeps_everything(tmp_path, store):
    out, prog, _ = run(tmp_path, WA, tumbling, "complete", store)
    assert len(prog) == 5                      # complete mode: no trailing batch
    assert out[1] == [(W("10:00", "10:05"), "a", 3, 8), (W("10:05", "10:10"), "b", 2, 9),
                      (W("10:10", "10:15"), "a", 1, 4), (W("10:25", "10:30"), "a", 1, 7)]
    # nothing is late in complete mode: a@10:14:59 joins [10:10, 10:15) in batch 3
    assert (W("10:10", "10:15"), "a", 2, 6) in out[3]
    assert len(out[4]) == 11
    assert metrics(prog) == [(3, 3, 0, 0), (4, 3, 0, 0), (7, 5, 0, 0), (10, 5, 0, 0), (11, 1, 0, 0)]


@pytest.mark.parametrize("store", STORES)
def test_complete_without_watermark_reports_none(tmp_path, store):
    out, prog, _ = run(tmp_path, WA[:2], lambda df: df.group_by("id").agg(F.count(), F.max("ts"), F.avg("v")),
                       "complete", store)
    assert len(prog) == 2 and all("watermark" not in p["event_time"] for p in prog)
    assert out[1] == [("a", 5, "10:26", 3.8), ("b", 2, "10:07", 4.5)]


@pytest.mark.parametrize("store", STORES)
def test_sliding_append_late_per_window(tmp_path, store):
    out, prog, _ = run(tmp_path, WA, sliding, "append", store)
    assert out == {
        0: [], 1: [],
        2: [(W("09:55", "10:05"), 6), (W("10:00", "10:10"), 9), (W("10:05", "10:15"), 4)],
        # a@10:14:59 is late for [10:05,10:15) (dropped: 1 group) and counted in [10:10,10:20)
        3: [(W("10:10", "10:20"), 4), (W("10:15", "10:25"), 3), (W("10:20", "10:30"), 3)],
        4: [],
        5: [(W("10:25", "10:35"), 3), (W("10:30", "10:40"), 1), (W("10:35", "10:45"), 1), (W("10:40", "10:50"), 1)]}
    assert metrics(prog) == [(4, 4, 0, 0), (6, 5, 0, 0), (6, 7, 3, 0), (4, 5, 3, 1), (6, 2, 0, 0), (2, 0, 4, 0)]


@pytest.mark.parametrize("store", STORES)
def test_dropped_counts_groups_not_rows(tmp_path, store):
    batches = [[r("a", "10:30")], [r("a", "10:00"), r("a", "10:01"), r("a", "10:02"), r("b", "10:03"), r("a", "10:31")],
               [r("a", "10:00"), r("a", "10:01"), r("b", "10:03"), r("a", "10:31")]]
    out, prog, _ = run(tmp_path, batches, tumbling, "update", store)
    # batch 1 uses WL = epoch: nothing late; batch 2 uses WL = 10:20: 3 late rows in 2 groups
    assert [m[3] for m in metrics(prog)] == [0, 0, 2]
    assert out[2] == [(W("10:30", "10:35"), "a", 3, 3)]


def test_append_without_watermark_is_refused(tmp_path):
    df = inc.read_stream.files(str(write_files(str(tmp_path / "in"), WA[:1])), "json",
                               "id STRING, ts TIMESTAMP, v BIGINT")
    with pytest.raises(inc.AnalysisException, match="with_watermark"):
        df.group_by(F.window("ts", "5 minutes")).count().write_stream.format("memory").query_name("nowm") \
            .output_mode("append").start()


@pytest.mark.parametrize("store", STORES)
def test_restart_with_changed_aggregation_is_refused(tmp_path, store):
    run(tmp_path, WA[:2], tumbling, "update", store, name="x")
    with pytest.raises(inc.IncompatibleCheckpointError):
        run(tmp_path, WA[:2], lambda df: df.with_watermark("ts", "10 minutes")
            .group_by(F.window("ts", "10 minutes"), "id").count(), "update", store, name="x")


def _job(src, chk, out, store, *crash):
    job = os.path.join(os.path.dirname(__file__), "agg_crash_query.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, job, src, chk, out, store, *map(str, crash)], env=env,
                          capture_output=True, text=True, timeout=300)


def _read(out_dir):
    return {int(f.split(".")[0]): sorted(open(os.path.join(out_dir, f)).read().splitlines())
            for f in os.listdir(out_dir) if f.endswith(".jsonl")}


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("crash", [(2, "process"), (3, "write"), (5, "read")])
def test_crash_and_restart_reproduce_output(tmp_path, store, crash):
    src = write_files(str(tmp_path / "in"), WA)
    ref = _job(src, str(tmp_path / "chk-ref"), str(tmp_path / "out-ref"), store)
    assert ref.returncode == 0, ref.stderr
    first = _job(src, str(tmp_path / "chk"), str(tmp_path / "out"), store, *crash)
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = _job(src, str(tmp_path / "chk"), str(tmp_path / "out"), store)
    assert second.returncode == 0, second.stderr
    assert _read(str(tmp_path / "out")) == _read(str(tmp_path / "out-ref"))
    assert sorted(_read(str(tmp_path / "out-ref"))) == [0, 1, 2, 3, 4, 5]


# --- the Arrow fast path computes exactly the DuckDB query's partials -------------------------
def _random_input(n=5000, seed=3):
    import random

    import pyarrow as pa
    rnd = random.Random(seed)
    us = [None if rnd.random() < 0.02 else rnd.randrange(-3 * 86400 * 10**6, 3 * 86400 * 10**6) for _ in range(n)]
    return pa.table({
        "k": [None if rnd.random() < 0.05 else f"k{rnd.randrange(7)}" for _ in range(n)],
        "n": pa.array([rnd.randrange(-5, 5) for _ in range(n)], pa.int32()),
        "v": pa.array([None if rnd.random() < 0.1 else rnd.randrange(-100, 100) for _ in range(n)], pa.int64()),
        "x": pa.array([None if rnd.random() < 0.1 else rnd.uniform(-1, 1) for _ in range(n)], pa.float64()),
        "ts": pa.array(us, pa.timestamp("us", tz="UTC")),
    })


@pytest.mark.parametrize("keys,aggs", [
    (lambda: (F.window("ts", "1 hour"), "k"), lambda: (F.count(),)),
    (lambda: (F.window("ts", "10 minutes", start_time="3 minutes"), "k", "n"),
     lambda: (F.count("x"), F.sum("v"), F.sum("x"), F.avg("v"), F.min("ts"), F.max("x"))),
    (lambda: ("k",), lambda: (F.count(), F.avg("x"), F.min("v"))),
    (lambda: ("ts", "k"), lambda: (F.count(),)),
])
@pytest.mark.parametrize("nparts", [1, 4, 5])
def test_arrow_partials_equal_duckdb_partials(keys, aggs, nparts):
    import pyarrow as pa

    from increments.operators.aggregate import WindowAggregateOp
    from increments.operators.base import PhysicalOp
    table = _random_input()

    class Input(PhysicalOp):
        def __init__(self):
            super().__init__([], table.schema)
            self.event_time_cols = {"ts": ("0", 0)}
    op = WindowAggregateOp(Input(), keys(), aggs(), "update")
    fast = op._partials_arrow(table, nparts)
    assert fast is not None
    op._partials_arrow = lambda *a: None
    exact = op._partials(table, nparts)
    order = [(c, "ascending") for c in exact.column_names if not c.startswith("__a")]
    fast, exact = fast.select(exact.column_names).sort_by(order), exact.sort_by(order)
    assert fast.schema.types == exact.schema.types
    for name in exact.column_names:
        a, b = fast.column(name).to_pylist(), exact.column(name).to_pylist()
        if pa.types.is_floating(exact.schema.field(name).type):
            assert all((x is None and y is None) or abs(x - y) < 1e-9 for x, y in zip(a, b)), name
        else:
            assert a == b, name


def test_arrow_path_declines_what_it_does_not_cover():
    from increments.operators.aggregate import WindowAggregateOp
    from increments.operators.base import PhysicalOp
    table = _random_input(100)

    class Input(PhysicalOp):
        def __init__(self):
            super().__init__([], table.schema)
            self.event_time_cols = {"ts": ("0", 0)}
    for keys, aggs in [((F.window("ts", "10 minutes", "5 minutes"), "k"), (F.count(),)),   # sliding: fan-out
                       ((F.window("ts", "1 hour"),), (F.first("v"),)),                      # order-dependent
                       ((), (F.count(),))]:                                                  # global aggregate
        assert WindowAggregateOp(Input(), keys, aggs, "update")._partials_arrow(table, 4) is None


def test_partition_ids_match_the_partition_sql():
    import pyarrow as pa

    from increments.operators.partitioning import partition_ids, partition_sql
    from increments.sql import run_sql
    t = pa.table({"w": pa.array([-5, 0, 1762000000000000, None, 3], pa.int64()), "c": ["a", None, "c5", "é", ""],
                  "f": [1.5, None, -0.0, 2.0, 1e20],
                  "i8": pa.array([-128, 127, None, 0, 5], pa.int8()),
                  "u": pa.array([2 ** 64 - 1, 0, 2 ** 63, None, 7], pa.uint64())})
    for cols in (["w", "c"], ["c"], ["f", "c"], ["i8"], ["u", "w", "c"], ["w"]):
        for n in (1, 2, 4, 7, 200):
            sql = partition_sql([f'"{c}"' for c in cols], n)
            assert partition_ids(t, cols, n).to_pylist() == run_sql(f"SELECT {sql} FROM __g", {"__g": t}).column(0).to_pylist()


def test_select_names_window_and_count_without_quotes(tmp_path):
    """select("window", "count") as a PySpark user writes it: both are SQL keywords in DuckDB."""
    import json as _json
    import increments as _inc
    from increments import functions as _F
    (tmp_path / "in").mkdir()
    with open(tmp_path / "in" / "a.json", "w") as f:
        for i in range(5):
            f.write(_json.dumps({"k": "a", "t": f"2026-01-01T00:0{i}:00Z"}) + "\n")
        f.write(_json.dumps({"k": "a", "t": "2026-01-01T02:00:00Z"}) + "\n")
    q = (_inc.read_stream.files(str(tmp_path / "in"), "json", "k STRING, t TIMESTAMP").with_watermark("t", "1 minute")
         .group_by(_F.window("t", "1 hour"), "k").count().select("window", "count", "k")
         .write_stream.format("memory").query_name("select_window_count").output_mode("append")
         .checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True).start())
    q.await_termination()
    assert q.exception() is None
    rows = _inc.memory_table("select_window_count").to_pylist()
    assert [(r["window"]["start"].hour, r["count"], r["k"]) for r in rows] == [(0, 5, "a")]


@pytest.mark.parametrize("store", STORES)
def test_group_by_a_decimal_key(tmp_path, store):
    """A DECIMAL(10,2) grouping key is kept in state (update mode, 2 partitions) and comes back
    with its scale; the counts and sums run on across batches."""
    from decimal import Decimal as D
    src = inc.read_stream.memory("price DECIMAL(10,2), n BIGINT")
    out: dict[int, list] = {}
    q = (src.group_by("price").agg(F.count("*").alias("c"), F.sum("n").alias("s"))
         .write_stream.output_mode("update").foreach_batch(lambda t, b: out.__setitem__(b, sorted(
             (str(r["price"]), r["c"], r["s"]) for r in t.to_pylist())))
         .option("state_store", store).option("state_partitions", 2)
         .checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True))
    src.add_data([{"price": D("1.25"), "n": 1}, {"price": D("-3.50"), "n": 2}, {"price": D("1.25"), "n": 3}])
    q.start().await_termination()
    src.add_data([{"price": D("1.25"), "n": 10}, {"price": D("0.00"), "n": 5}])
    q.start().await_termination()
    assert out == {0: [("-3.50", 1, 2), ("1.25", 2, 4)], 1: [("0.00", 1, 5), ("1.25", 3, 14)]}


def test_md5_mod_sql_is_the_128_bit_remainder():
    """partitioning.md5_mod_sql (the digest's halves) equals DuckDB's md5_number(text) % n over texts
    of every length and partition counts up to 2**31 - 1 (the partition of every stored key)."""
    import random

    import pyarrow as pa

    from increments.operators.partitioning import md5_mod_sql
    from increments.sql import run_sql
    rnd = random.Random(7)
    texts = ["", "\\N", "é", "a\x1fb"] + [str(rnd.randrange(-2 ** 63, 2 ** 63)) for _ in range(300)] + [
        "".join(chr(rnd.randrange(32, 0x3000)) for _ in range(rnd.randrange(1, 90))) for _ in range(300)]
    t = pa.table({"s": pa.array(texts + [None], pa.string())})
    for n in (2, 3, 4, 7, 64, 200, 1000003, 2 ** 31 - 1):
        got = run_sql(f"SELECT {md5_mod_sql('s', n)} AS p FROM __t", {"__t": t}).column(0).to_pylist()
        want = run_sql(f"SELECT CAST(md5_number(s) % {n} AS INTEGER) AS p FROM __t", {"__t": t}).column(0).to_pylist()
        assert got == want

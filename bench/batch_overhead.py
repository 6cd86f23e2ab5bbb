"""Per-batch overhead of the engine: the whole protocol for an empty and a one-row stateless batch,
and for a small stateful batch (group_by + count on RocksDB with 2 state partitions), beside a
plain DuckDB query over a one-row Arrow table measured in the same run.

    .venv/bin/python bench/batch_overhead.py [--batches 300] [--log-url postgresql+psycopg://...]

Each batch runs the whole protocol in-process through the five step functions (plan with the
write-ahead offsets row, read, process, write to the memory sink, commit row) on the embedded
SQLite log unless --log-url is given. Engine and reference run in alternating rounds; medians.

Stateful "data work" = the time of the operator tree's execute() inside the process step: the
aggregation's own compute plus its state reads and writes (opening the two partitions' stores at
N-1, get/put); everything else of the batch (log, fence, state commit of version N, staging,
progress) is protocol overhead, printed as "above data work".

On the SQLite log the run also times the durable floor (class DurableFloor): the writes the
protocol must make durable, done alone on the same disk (the log's two commits; plus, stateful,
two changelog files side by side), and prints what the engine spends above it.

Per batch, counted in a separate pass (not timed): the statements sent to the log (on PostgreSQL
each is a round trip: the libpq trace counts ReadyForQuery messages, which includes pings, BEGIN,
COMMIT and ROLLBACK; on SQLite the statements SQLite runs, BEGIN/COMMIT included), the log's
durable commits (transactions that wrote a row), and the fsync() calls made from Python (state
files and their directories; SQLite's own fsync of its WAL is one per durable commit with
synchronous=FULL). The counters hook the DBAPI connections through the SQLAlchemy pool's connect
event, so they count the same way whatever code path the engine uses.

Stateful CPU by thread: the thread running the batch (its own CPU time, median), and the mean per
stateful batch of the StateManager's pool (the partitions' opens and commits not run on the batch's
thread), the background snapshot jobs (RocksDB checkpoint, its upload and the retention cleanup of
every snapshot_interval-th version) and RocksDB's own flush/compaction threads, from /proc over the
timed batches (only the stateful cases use them).

A second stateful case, "stateful_1p", sends the same 100 rows all with one key: one of the two
partitions is touched, the other commits a version with no changes (no file: state.files).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402
import sqlalchemy as sa  # noqa: E402

import increments as inc  # noqa: E402
from increments.checkpoint.log import engine_for, resolve_log_url  # noqa: E402
from increments.execution import steps  # noqa: E402
from increments.sql import run_sql  # noqa: E402


# -- counting ---------------------------------------------------------------------------------------
class LogCounter:
    """Statements and durable commits of every DBAPI connection an engine opens (see module doc)."""

    _by_engine: dict[int, "LogCounter"] = {}

    @classmethod
    def of(cls, engine: sa.Engine) -> "LogCounter":
        """One counter per engine (the three cases share the PostgreSQL engine and its pool)."""
        c = cls._by_engine.get(id(engine))
        if c is None:
            c = cls._by_engine[id(engine)] = cls(engine)
        return c

    def __init__(self, engine: sa.Engine):
        self.on = False
        self.statements = 0
        self.commits = 0
        self._pg: list[Any] = []
        self._trace = None
        sa.event.listen(engine, "connect", self._connected)

    def _connected(self, dbapi_conn: Any, _rec: Any) -> None:
        if hasattr(dbapi_conn, "set_trace_callback"):       # sqlite3
            state = {"txn": False, "wrote": False}

            def cb(stmt: str) -> None:
                if not self.on:
                    return
                s = stmt.lstrip()[:8].upper()
                self.statements += 1
                if s.startswith("BEGIN"):
                    state["txn"], state["wrote"] = True, False
                elif s.startswith(("COMMIT", "END")):
                    self.commits += int(state["wrote"])
                    state["txn"] = False
                elif s.startswith("ROLLBACK"):
                    state["txn"] = False
                elif s.startswith(("INSERT", "UPDATE", "DELETE")):
                    if state["txn"]:
                        state["wrote"] = True
                    else:
                        self.commits += 1          # autocommit: the statement is its transaction
            dbapi_conn.set_trace_callback(cb)
        elif hasattr(dbapi_conn, "pgconn"):                 # psycopg 3: libpq's protocol trace
            self._pg.append(dbapi_conn)
            if self._trace is not None:
                self._start(dbapi_conn)

    def _start(self, conn: Any) -> None:
        from psycopg import pq
        conn.pgconn.trace(self._trace.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def start(self) -> None:
        self.statements = self.commits = 0
        self.on = True
        if self._pg:
            self._trace = tempfile.TemporaryFile("w+")
            for c in self._pg:
                if not c.closed:
                    self._start(c)

    def stop(self) -> None:
        self.on = False
        if self._trace is None:
            return
        for c in self._pg:
            if not c.closed:
                c.pgconn.untrace()
        self._trace.seek(0)
        wrote = False
        for line in self._trace:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or parts[0] != "B":
                continue
            if parts[2] == "CommandComplete":
                tag = parts[3].strip().strip('"') if len(parts) > 3 else ""
                words = tag.split()
                if words and words[0] in ("INSERT", "UPDATE", "DELETE") and words[-1] != "0":
                    wrote = True
            elif parts[2] == "ReadyForQuery":
                self.statements += 1
                status = parts[3].strip() if len(parts) > 3 else "I"
                if status == "I":
                    self.commits += int(wrote)
                    wrote = False
        self._trace.close()
        self._trace = None


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each live thread of this process, summed by group: the main
    thread, the StateManager's pool (``increments-state``), the background snapshot jobs
    (``increments-snapshot``), RocksDB's own threads (``rocksdb:*``), other."""
    import threading
    names = {t.native_id: t.name for t in threading.enumerate()}
    tck = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        name = names.get(int(tid), comm)
        group = ("main" if name == "MainThread" else "state commit/open pool" if name.startswith("increments-state")
                 else "snapshot jobs" if name.startswith("increments-snapshot")
                 else "RocksDB flush/compaction" if name.startswith("rocksdb") else "other")
        out[group] = out.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / tck
    return out


class FsyncCounter:
    def __init__(self):
        self.n = 0
        self._orig = os.fsync

    def __enter__(self):
        def counted(fd: int) -> None:
            self.n += 1
            self._orig(fd)
        os.fsync = counted
        return self

    def __exit__(self, *exc):
        os.fsync = self._orig


# -- workloads ---------------------------------------------------------------------------------------
class Case:
    """One query with its runtime, a batch of rows to add before each batch, and timers."""

    def __init__(self, kind: str, log_url: str | None, synchronous: str | None = None):
        chk = tempfile.mkdtemp(prefix="bench-overhead-")
        url = resolve_log_url(log_url, chk)
        self.counter = LogCounter.of(engine_for(url))       # before the runtime opens its connections
        name = f"bench_{kind}_{time.time_ns()}"
        if kind.startswith("stateful"):
            self.src = inc.read_stream.memory("k STRING, v BIGINT")
            w = (self.src.group_by("k").count().write_stream.format("memory").output_mode("update")
                 .option("state_store", "rocksdb").option("state_partitions", 2))
            keys = 10 if kind == "stateful" else 1
            self.rows = [{"k": f"k{i % keys}", "v": i} for i in range(100)]
        else:
            self.src = inc.read_stream.memory("id BIGINT, name STRING")
            w = self.src.filter("id >= 0").select("id", "upper(name) AS name").write_stream.format("memory")
            self.rows = [{"id": 1, "name": "x"}] * (1 if kind == "one_row" else 0)
        w = w.query_name(name).checkpoint_location(chk)
        if log_url:
            w = w.option("log_url", log_url)
        self.rt = w.build()
        if synchronous:     # a per-connection setting: the log's own connection (sql_log.LogConnection)
            self.rt.log.conn.execute(f"PRAGMA synchronous={synchronous}", (), fetch=False)
        self.work: list[float] = []
        self.cpu: list[float] = []         # CPU time of the process (all threads) per batch
        self.main_cpu: list[float] = []    # CPU time of the thread running the batch
        self.commit_ms: list[float] = []
        root = self.rt.plan.root
        execute = root.execute

        def timed(ctx: Any) -> Any:        # the data work: operator compute + state reads/writes
            t0 = time.perf_counter()
            try:
                return execute(ctx)
            finally:
                self.work.append(time.perf_counter() - t0)
        root.execute = timed
        commit_all = self.rt.state.commit_all

        def timed_commit(batch_id: int) -> Any:
            t0 = time.perf_counter()
            try:
                return commit_all(batch_id)
            finally:
                self.commit_ms.append(time.perf_counter() - t0)
        self.rt.state.commit_all = timed_commit

    def batches(self, n: int) -> list[float]:
        times = []
        for _ in range(n):
            self.src.add_data(self.rows)
            c0 = time.process_time()
            m0 = time.thread_time()
            t0 = time.perf_counter()
            progress = steps.run_one_batch(self.rt)
            times.append(time.perf_counter() - t0)
            self.main_cpu.append(time.thread_time() - m0)
            self.cpu.append(time.process_time() - c0)
            assert progress is not None and progress["num_input_rows"] == len(self.rows)
        return times

    def count(self, n: int) -> dict[str, float]:
        self.counter.start()
        with FsyncCounter() as f:
            self.batches(n)
        self.counter.stop()
        return {"statements": self.counter.statements / n, "commits": self.counter.commits / n, "fsyncs": f.n / n}

    def close(self) -> None:
        self.rt.close()


def duckdb_reference(n: int) -> list[float]:
    table = pa.table({"id": pa.array([1], pa.int64()), "name": ["x"]})
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = run_sql("SELECT id, upper(name) AS name FROM t WHERE id >= 0", {"t": table})
        times.append(time.perf_counter() - t0)
        assert out.num_rows == 1
    return times


class DurableFloor:
    """What the disk alone takes for the durable writes a batch must make, measured beside the
    engine: the log's two commits (two autocommit INSERTs into a scratch SQLite WAL file with
    synchronous=FULL, as the log's) and, for the stateful floor, the two partitions' changelog
    files written create-only and durably (storage's write_bytes: temp file, fsync, link, directory
    fsync) side by side on two threads, as the state commit does."""

    def __init__(self):
        import sqlite3
        from concurrent.futures import ThreadPoolExecutor

        from increments import storage
        d = tempfile.mkdtemp(prefix="bench-floor-")
        self.db = sqlite3.connect(os.path.join(d, "floor.sqlite"), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL").fetchall()
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE t (q TEXT, b INTEGER, body TEXT, PRIMARY KEY (q, b))")
        self.parts = [storage.location(os.path.join(d, "state", "0", str(p))) for p in range(2)]
        self.pool = ThreadPoolExecutor(max_workers=2)
        self.n = 0

    def log(self, n: int) -> list[float]:
        times = []
        for _ in range(n):
            self.n += 1
            t0 = time.perf_counter()
            self.db.execute("INSERT INTO t VALUES ('q', ?, ?)", (2 * self.n, "x" * 400))
            self.db.execute("INSERT INTO t VALUES ('q', ?, ?)", (2 * self.n + 1, "x" * 900))
            times.append(time.perf_counter() - t0)
        return times

    def stateful(self, n: int) -> list[float]:
        times = []
        data = b"x" * 600
        for _ in range(n):
            self.n += 1
            t0 = time.perf_counter()
            self.db.execute("INSERT INTO t VALUES ('q', ?, ?)", (2 * self.n, "x" * 400))
            futs = [self.pool.submit(loc.write_bytes, f"{self.n}.changelog", data, create_only=True)
                    for loc in self.parts]
            for f in futs:
                f.result()
            self.db.execute("INSERT INTO t VALUES ('q', ?, ?)", (2 * self.n + 1, "x" * 900))
            times.append(time.perf_counter() - t0)
        return times


def alternate(n: int, rounds: int, runs: dict[str, Callable[[int], list[float]]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in runs}
    per = max(1, n // rounds)
    for _ in range(rounds):
        for k, run in runs.items():
            out[k] += run(per)
    return out


def ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--count-batches", type=int, default=50)
    ap.add_argument("--log-url", default=None)
    ap.add_argument("--sqlite-synchronous", default=None, choices=["NORMAL", "FULL"],
                    help="override the SQLite log's synchronous setting (NORMAL: commits not fsynced, not "
                         "durable against a power loss; only to measure what durability costs)")
    a = ap.parse_args()
    cases = {k: Case(k, a.log_url, a.sqlite_synchronous) for k in ("empty", "one_row", "stateful", "stateful_1p")}
    for c in cases.values():
        c.batches(20)                      # warm-up: connections, DuckDB, RocksDB working copies
        c.work.clear()
        c.cpu.clear()
        c.main_cpu.clear()
        c.commit_ms.clear()
    floor = DurableFloor()
    threads0 = thread_cpu()
    res = alternate(a.batches, a.rounds, {"duckdb": duckdb_reference, "floor_log": floor.log,
                                          "floor_state": floor.stateful,
                                          **{k: c.batches for k, c in cases.items()}})
    threads1 = thread_cpu()
    counts = {k: c.count(a.count_batches) for k, c in cases.items()}
    st = cases["stateful"]
    work = st.work[:len(res["stateful"])]
    above = [t - w for t, w in zip(res["stateful"], work)]
    backend = "PostgreSQL" if a.log_url and a.log_url.startswith("postgres") else "SQLite (embedded)"
    if backend.startswith("SQLite"):
        mode = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
        conn = getattr(cases["empty"].rt.log, "conn", None)
        if conn is not None:       # the log's own connection (where an override was set)
            value = conn.execute("PRAGMA synchronous", ())[0]
        else:                      # releases before the log had its own connection
            with cases["empty"].rt.log.engine.connect() as c:
                value = c.exec_driver_sql("PRAGMA synchronous").scalar()
        backend += f", synchronous={mode.get(value, '?')}"
    for c in cases.values():
        c.close()
    ref = ms(res["duckdb"])
    print(f"per-batch overhead, log on {backend}; medians of {a.batches} batches per case in {a.rounds} "
          "rounds alternating with the reference")
    print(f"  reference: plain DuckDB query over a 1-row Arrow table          {ref:8.3f} ms")
    if not backend.startswith("PostgreSQL"):
        print(f"  durable floor, stateless: the log's 2 commits on this disk alone {ms(res['floor_log']):8.3f} ms")
        print(f"  durable floor, stateful: + 2 changelog files (parallel)        {ms(res['floor_state']):8.3f} ms")
    for k, label in (("empty", "empty stateless batch (whole protocol)"),
                     ("one_row", "one-row stateless batch (filter + select)")):
        t = ms(res[k])
        print(f"  {label:<60}{t:8.3f} ms  ({t / ref:5.2f}x the reference; CPU {ms(cases[k].cpu[:len(res[k])]):.3f} ms)")
    if not backend.startswith("PostgreSQL"):
        print(f"    empty batch above its durable floor                           "
              f"{ms(res['empty']) - ms(res['floor_log']):8.3f} ms")
    t, w, ab = ms(res["stateful"]), ms(work), ms(above)
    print(f"  {'stateful batch: group_by(k).count(), rocksdb, 2 partitions,':<60}{t:8.3f} ms  ({t / ref:5.2f}x the "
          f"reference; CPU {ms(st.cpu[:len(res['stateful'])]):.3f} ms)")
    print(f"    100 rows over 10 keys per batch (both partitions touched)")
    print(f"    data work (operator compute + state reads/writes, in process) {w:8.3f} ms")
    print(f"    above data work (log, fence, state commit, staging, progress) {ab:8.3f} ms")
    print(f"    of which the state commit of both partitions (commit_all)      {ms(st.commit_ms):8.3f} ms")
    if not backend.startswith("PostgreSQL"):
        print(f"    above data work and the durable floor                          {ab - ms(res['floor_state']):8.3f} ms")
    s1 = cases["stateful_1p"]
    n1 = len(res["stateful_1p"])
    t1, w1 = ms(res["stateful_1p"]), ms(s1.work[:n1])
    print(f"  {'stateful, 100 rows of one key (1 of 2 partitions touched)':<60}{t1:8.3f} ms  (CPU "
          f"{ms(s1.cpu[:n1]):.3f} ms; data work {w1:.3f} ms, commit_all {ms(s1.commit_ms):.3f} ms)")
    n_st = len(res["stateful"])
    mean_ms = 1000 / max(1, n_st + n1)
    print(f"    CPU by thread (background jobs: mean per batch of both stateful cases):")
    print(f"      thread running the batch (median, 10-key case)               {ms(st.main_cpu[:n_st]):8.3f} ms")
    for g in ("state commit/open pool", "snapshot jobs", "RocksDB flush/compaction"):
        print(f"      {g:<61}{(threads1.get(g, 0.0) - threads0.get(g, 0.0)) * mean_ms:8.3f} ms")
    print(f"  per batch, counted over {a.count_batches} more batches (not timed):")
    print(f"    {'case':<12}{'log statements':>16}{'log commits':>13}{'fsync() from Python':>22}")
    for k, c in counts.items():
        print(f"    {k:<12}{c['statements']:>16.1f}{c['commits']:>13.1f}{c['fsyncs']:>22.1f}")


if __name__ == "__main__":
    main()

"""Issue 15 item 9: a process that wrote Delta tables on a worker thread and then reads one on the
main thread must exit 0. DeltaTable.to_pyarrow_table() scans through deltalake's Python filesystem
with Parquet pre-buffering; Arrow IO threads that release those Python buffers while the
interpreter exits abort the process (SIGABRT, "terminate called without an active exception") in
about one exit in six. increments reads a Delta table's data files itself instead
(sinks/delta.read_table, inc.read.delta(...).load()). The abort is intermittent: each script runs
several times, and every run must exit 0. (Measured here before the change: 6 of 30 runs of the
deltalake-only script with DeltaTable.to_pyarrow_table() aborted, 1 of 20 of the query script.)

A run count cannot guard a 1-in-20 abort (8 runs miss it about 2 times in 3), so the guard is on the
cause, which is deterministic: each script runs under TRAP, which makes every pyarrow Python
filesystem (pyarrow.fs.PyFileSystem, the only way Python buffers reach Arrow's IO threads, and what
DeltaTable.to_pyarrow_table/to_pyarrow_dataset build around DeltaStorageHandler) fail loudly when
constructed. A read path that went back to deltalake's pyarrow scan fails every run, not one in
twenty. Each script then also runs a few times and must exit 0 (a smoke check, not the guard)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

RUNS = 3

TRAP = textwrap.dedent("""
    import pyarrow.fs
    def _trap(*a, **k):
        raise AssertionError("a pyarrow Python filesystem was built: Python buffers reach Arrow's IO threads")
    pyarrow.fs.PyFileSystem = _trap
""")

ALONE = textwrap.dedent("""
    import sys, tempfile, threading
    from deltalake import DeltaTable, write_deltalake     # deltalake first, as a user's script may
    import pyarrow as pa
    from increments.sinks.delta import read_table
    d = tempfile.mkdtemp()
    def work():
        for i in range(2):
            write_deltalake(d, pa.table({"x": [i]}), mode="append")
            DeltaTable(d).transaction_version("app")
    t = threading.Thread(target=work); t.start(); t.join()
    table, version = read_table(d)
    print(table.num_rows, version)
""")

QUERY = textwrap.dedent("""
    import json, os, sys, tempfile
    from deltalake import DeltaTable
    import increments as inc
    d = tempfile.mkdtemp()
    os.makedirs(f"{d}/in")
    for k in range(3):
        with open(f"{d}/in/f{k}.json", "w") as f:
            f.write(json.dumps({"id": k, "v": json.dumps({"n": k}) if k != 1 else "{bad"}) + "\\n")
    q = (inc.read_stream.files(f"{d}/in", "json", "id BIGINT, v STRING", max_files_per_trigger=1)
         .parse_json("n BIGINT", column="v", dead_letter=inc.dead_letter.delta(f"{d}/dlq"))
         .write_stream.format("delta").checkpoint_location(f"{d}/chk").trigger(available_now=True)
         .start(f"{d}/out"))
    q.await_termination()           # the Delta writes ran on the query's thread
    out, dlq = inc.read.delta(f"{d}/out").load(), inc.read.delta(f"{d}/dlq").load()
    print(json.dumps([sorted(out.column("n").to_pylist()), dlq.num_rows]))
""")


def _run(script: str) -> list[subprocess.CompletedProcess]:
    """The script once under TRAP (the deterministic guard), then RUNS - 1 times as written."""
    return [subprocess.run([sys.executable, "-c", (TRAP if k == 0 else "") + script], capture_output=True,
                           text=True, timeout=300) for k in range(RUNS)]


def test_the_trap_catches_deltalakes_own_pyarrow_scan():
    """The guard is live: the scan this module is about (DeltaTable.to_pyarrow_table) trips it."""
    script = ALONE.replace("table, version = read_table(d)", "table, version = DeltaTable(d).to_pyarrow_table(), 1")
    r = subprocess.run([sys.executable, "-c", TRAP + script], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "a pyarrow Python filesystem was built" in r.stderr, r.stderr[-500:]


def test_deltalake_alone_writes_on_a_thread_then_a_read_on_main_exits_0():
    runs = _run(ALONE)
    assert [r.returncode for r in runs] == [0] * RUNS, [r.stderr[-500:] for r in runs if r.returncode]
    assert all(r.stdout.split() == ["2", "1"] for r in runs)


def test_a_query_with_delta_sink_and_dead_letter_table_then_reads_exits_0():
    runs = _run(QUERY)
    assert [r.returncode for r in runs] == [0] * RUNS, [r.stderr[-500:] for r in runs if r.returncode]
    assert all(json.loads(r.stdout) == [[0, 2], 1] for r in runs)


def test_the_same_on_s3(s3_bucket):
    """Objects are read through increments.storage into Arrow memory: no Python buffer reaches Arrow's threads."""
    script = ALONE.replace("d = tempfile.mkdtemp()", f"d = {s3_bucket + '/t'!r}")
    runs = [subprocess.run([sys.executable, "-c", TRAP + script.replace("/t'", f"/t{k}'")], capture_output=True,
                           text=True, timeout=300) for k in range(2)]
    assert [r.returncode for r in runs] == [0] * 2, [r.stderr[-500:] for r in runs if r.returncode]
    assert all(r.stdout.split() == ["2", "1"] for r in runs)

"""max_files_per_trigger="auto" with .option("target_batch_duration", ...): the planner starts
small, grows while batches stay under the target, backs off after a slow one, and records each
batch's size in offsets[N].conf["batch_size"], so a redo after a SIGKILL reads exactly the same
files. No timing asserts: a slow batch is made slow on purpose (a sink that sleeps far past the
target), the others are far under it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import increments as inc
from increments.checkpoint.log import open_log
from increments.execution.batch_sizing import next_size

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = 5


def _files(d, n: int) -> str:
    os.makedirs(d, exist_ok=True)
    for f in range(n):
        with open(os.path.join(d, f"part-{f:04d}.json"), "w") as out:
            out.write("".join(json.dumps({"id": f * 100 + r, "f": f}) + "\n" for r in range(ROWS)))
    return str(d)


def _sizes(chk: str) -> list[int]:
    meta = json.load(open(os.path.join(chk, "metadata.json")))
    log = open_log(None, chk, meta["id"])
    out, n = [], 0
    while (e := log.get_offsets(n)) is not None:
        out.append(e.conf.get("batch_size", {}).get("0"))
        n += 1
    return out


def test_next_size_rule():
    assert next_size("files", None, None, 30_000) == 1                  # start small
    assert next_size("offsets", None, None, 30_000) == 1000
    assert next_size("files", 4, 100, 30_000) == 32                     # grow, at most 8x per batch
    assert next_size("files", 10, 20_000, 30_000) == 15                 # toward the target
    assert next_size("files", 10, 60_000, 30_000) == 4                  # back off: 10 * 30/60 * 0.8
    assert next_size("files", 1, 90_000, 30_000) == 1                   # never below 1
    assert next_size("files", 10, 100, 30_000, full=False) == 10        # backlog ran out: keep


def test_backlog_grows_from_one_file(tmp_path):
    src = _files(tmp_path / "in", 40)
    chk = str(tmp_path / "chk")
    got = []
    q = (inc.read_stream.files(src, "json", "id BIGINT, f BIGINT", max_files_per_trigger="auto")
         .write_stream.foreach_batch(lambda t, b: got.append(t.num_rows)).checkpoint_location(chk)
         .query_name("grow").option("target_batch_duration", "1 minute").trigger(available_now=True).start())
    q.await_termination()
    sizes = _sizes(chk)
    assert sizes == [1, 8, 64]                             # every batch far under a minute: 8x each time
    assert got == [1 * ROWS, 8 * ROWS, 31 * ROWS]          # the last batch takes the 31 files left


def test_slow_batch_backs_off(tmp_path):
    src = _files(tmp_path / "in", 40)
    chk = str(tmp_path / "chk")
    rows = []

    def sink(table, batch_id):
        rows.append(table.num_rows)
        if batch_id == 1:
            time.sleep(5.0)                                # batch 1 takes far past the 2 s target
    q = (inc.read_stream.files(src, "json", "id BIGINT, f BIGINT", max_files_per_trigger="auto")
         .write_stream.foreach_batch(sink).checkpoint_location(chk).query_name("backoff")
         .option("target_batch_duration", "2 seconds").trigger(available_now=True).start())
    q.await_termination()
    sizes = _sizes(chk)
    assert sizes[0] == 1 and sizes[1] > 1                  # batch 0 was quick: grown
    assert sizes[2] <= sizes[1] * 2 / 5 * 0.8              # backed off: size * 2 s / (> 5 s) * 0.8
    assert sizes[3] > sizes[2]                             # and grows again after a quick batch
    assert sum(rows) == 40 * ROWS


def test_redo_after_sigkill_reads_the_recorded_range(tmp_path):
    src = _files(tmp_path / "in", 30)
    chk, out = str(tmp_path / "chk"), str(tmp_path / "out")
    job = [sys.executable, os.path.join(HERE, "adaptive_query.py"), src, chk, out, "1 minute"]
    killed = subprocess.run(job + ["2", "read"], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    before = _sizes(chk)
    assert before == [1, 8, 64]                            # offsets[2] written with its size, no commit
    done = subprocess.run(job, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = _sizes(chk)
    assert after[:3] == before                             # the redo kept offsets[2] and its size
    batch2 = [json.loads(x) for x in open(os.path.join(out, "2.jsonl"))]
    assert sorted({r["f"] for r in batch2}) == list(range(9, 30))   # exactly files 9..29
    ids = [json.loads(x)["id"] for b in sorted(os.listdir(out)) for x in open(os.path.join(out, b))]
    assert sorted(ids) == sorted(f * 100 + r for f in range(30) for r in range(ROWS))


def test_delta_source_auto(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake
    table = str(tmp_path / "bronze")
    for v in range(12):                                    # 12 commits of one file each
        write_deltalake(table, pa.table({"id": [v * 10 + r for r in range(ROWS)]}), mode="append")
    chk = str(tmp_path / "chk")
    got = []
    q = (inc.read_stream.delta(table, max_files_per_trigger="auto").write_stream
         .foreach_batch(lambda t, b: got.append(t.num_rows)).checkpoint_location(chk).query_name("delta_auto")
         .trigger(available_now=True).start())
    q.await_termination()
    assert _sizes(chk) == [1, 8, 64]                       # default target: 30 seconds
    assert got == [ROWS, 8 * ROWS, 3 * ROWS]

"""Writes a frozen checkpoint of the current release for tests/checkpoint/test_frozen_checkpoints.py.

Run by hand when the checkpoint format changes (a new log entry layout, state encoding, seen-files
entry...), with the new release's name, and commit the folder it writes:

    PYTHONPATH=$PWD python tests/checkpoint/make_frozen.py <release>-<date>
    git add tests/checkpoint/frozen/<release>-<date>

The checkpoint records absolute paths: the plan in chk/conf.json names the source's directory and
the sink's table (a restart with other paths is refused as a different query), and chk/log.json
names the SQLite log's file. So the query runs at a fixed place, PLACE/<name>, and the folder is
then copied into tests/checkpoint/frozen/<name>; the test copies it back to PLACE/<name> (the place
its paths point to) before restarting on it. The seen-files entries record file names relative to
the source's directory.

The folder holds in/ (the three input files), chk/ (the checkpoint: SQLite offsets/commits log,
RocksDB state with changelog checkpointing, the file source's seen-files entries) and out/ (the
Delta sink). Earlier folders are never rewritten: each is what its release wrote, and every later
release must restart on it. The query (`start` below) must stay the same across releases: the test
restarts it on each frozen folder.

The query: a 10-minute windowed count of `ts` with a 5-minute watermark, append mode, one file per
batch, available_now. The inputs and what each batch does:

    batch 0, f0: 00:01 00:02 00:12   watermark for the next batch -> 00:07
    batch 1, f1: 00:13 00:25         nothing emitted (00:07 ends no window); watermark -> 00:20
    batch 2, f2: 00:03 00:27 00:41   00:03 is counted: a row is late against the previous batch's
                                     watermark (00:07, as Spark's late-events watermark), and its
                                     window ends at 00:10; evicting at 00:20 emits [00:00,00:10) = 3
                                     and [00:10,00:20) = 2; watermark -> 00:36
    batch 3, no data                 the watermark's advance emits [00:20,00:30) = 2;
                                     [00:40,00:50) = 1 stays in state
    f3 (added by the test): 00:44 00:58: batch 4 counts [00:40,00:50) = 2 (the frozen state's 1 +
                                     this file's 1), watermark -> 00:53; the no-data batch 5 emits
                                     it; [00:50,01:00) = 1 stays
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import increments as inc

SCHEMA = "id BIGINT, ts TIMESTAMP"
FILES = {
    "f0.json": [(0, "00:01"), (1, "00:02"), (2, "00:12")],
    "f1.json": [(3, "00:13"), (4, "00:25")],
    "f2.json": [(5, "00:03"), (6, "00:27"), (7, "00:41")],
}
NEXT_FILE = ("f3.json", [(8, "00:44"), (9, "00:58")])


def write_input(path: str, rows: list[tuple[int, str]]) -> None:
    with open(path, "w") as f:
        for i, hm in rows:
            f.write(json.dumps({"id": i, "ts": f"2026-01-01T{hm}:00Z"}) + "\n")


def start(folder: str, local_dir: str) -> inc.StreamingQuery:
    """QUERY on `folder`'s in/, chk/ and out/, caches (RocksDB working copies) in `local_dir`."""
    frame = (inc.read_stream.files(os.path.join(folder, "in"), "json", SCHEMA, max_files_per_trigger=1)
             .with_watermark("ts", "5 minutes")
             .group_by(inc.functions.window("ts", "10 minutes")).count())
    return (frame.write_stream.format("delta").output_mode("append")
            .checkpoint_location(os.path.join(folder, "chk")).query_name("frozen_windowed_count")
            .option("state_store", "rocksdb").option("changelog_checkpointing", True)
            .option("state_partitions", 2).option("local_dir", local_dir)
            .trigger(available_now=True).start(os.path.join(folder, "out")))


PLACE = "/tmp/increments-frozen-checkpoints"
FROZEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frozen")


def main(name: str) -> None:
    kept = os.path.join(FROZEN, name)
    if os.path.exists(kept):
        sys.exit(f"{kept} exists: frozen checkpoints are never rewritten; name a new one")
    folder = os.path.join(PLACE, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "in"))
    for name, rows in FILES.items():
        write_input(os.path.join(folder, "in", name), rows)
    local_dir = folder + ".local"                      # caches: not part of the frozen folder
    try:
        q = start(folder, local_dir)
        q.await_termination()
        print("last batch id", q.recent_progress[-1]["batch_id"])
        shutil.copytree(folder, kept)
        print("wrote", kept)
    finally:
        shutil.rmtree(local_dir, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])

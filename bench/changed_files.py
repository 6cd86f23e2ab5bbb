"""Cost of checking every file read for changes in the plan step (issue 28 item 1).

    .venv/bin/python bench/changed_files.py [--files 100000] [--per-entry 100] [--s3-files 10000] [--rounds 5]

A directory of --files small JSON files, all read already: the seen-files log holds them in
entries of --per-entry files (written directly, as the plans would have). Timed: the plan step's
source work when nothing new arrived (FileSource.latest_offset at the last entry, the idle
trigger's plan), with the check off (changed_files_window=0: a listing of the names after the last
one read) and with a window covering every file read (changed_files_window=--files: one listing
from the oldest name, compared with the window), warm (the window in memory, the local runner) and
cold (a new source object: the window loaded from its index plus the entries after it, as a
Dagster run's process does). Medians of --rounds, printed as ratios against the check off, in the
same run. With --s3-files > 0 the same on the moto S3 server (tests/object_store.py), smaller
(uploading 100k objects to moto alone takes minutes).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from increments import storage  # noqa: E402
from increments.sources.files import FileSource  # noqa: E402
from increments.sources.read_files_window import DEFAULT_WINDOW, INDEX_EVERY  # noqa: E402

SCHEMA = "id BIGINT"


def seed_log(src: FileSource, per_entry: int) -> int:
    """Seen-files entries for every file now under the source (as plans would have written them),
    and the window indexes its commits would have left; the last entry number."""
    files = src.list_after(None)
    n = -1
    for n, i in enumerate(range(0, len(files), per_entry)):
        src._log.write(n, files[i:i + per_entry])
        src.commit(n)
    return n


def timed(fn, rounds: int) -> float:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def measure(root_url: str, chk_url: str, nfiles: int, per_entry: int, rounds: int, label: str) -> None:
    def source(window: int) -> FileSource:
        s = FileSource(root_url, "json", SCHEMA, changed_files_window=window)
        s.open(storage.location(chk_url), 0, "bench")
        return s
    seeder = source(nfiles)
    last = seed_log(seeder, per_entry)
    off = source(0)
    warm = source(nfiles)
    warm.latest_offset(last)                       # the window built once, as the runner keeps it
    t_off = timed(lambda: off.latest_offset(last), rounds)
    t_warm = timed(lambda: warm.latest_offset(last), rounds)
    t_cold = timed(lambda: source(nfiles).latest_offset(last), max(1, rounds // 2))
    default = source(DEFAULT_WINDOW)
    default.latest_offset(last)
    t_default = timed(lambda: default.latest_offset(last), rounds)
    assert off.latest_offset(last) == last and warm.latest_offset(last) == last
    print(f"{label}: {nfiles} files read in {last + 1} entries (an index every {INDEX_EVERY})")
    print(f"  idle plan, check off (changed_files_window=0)      {t_off:9.1f} ms   1.00x")
    print(f"  idle plan, default window ({DEFAULT_WINDOW} files), warm   {t_default:9.1f} ms   "
          f"{t_default / t_off:5.2f}x")
    print(f"  idle plan, all {nfiles} files checked, warm      {t_warm:9.1f} ms   {t_warm / t_off:5.2f}x")
    print(f"  idle plan, all {nfiles} files checked, cold (new run) {t_cold:9.1f} ms   {t_cold / t_off:5.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--per-entry", type=int, default=100)
    ap.add_argument("--s3-files", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="changed-files-")
    try:
        inp = os.path.join(work, "in")
        os.makedirs(inp)
        for k in range(args.files):
            with open(os.path.join(inp, f"f{k:07d}.json"), "w") as f:
                f.write('{"id": %d}\n' % k)
        measure(inp, os.path.join(work, "chk"), args.files, args.per_entry, args.rounds, "local disk")
        if args.s3_files:
            from concurrent.futures import ThreadPoolExecutor

            import boto3

            from object_store import start_server     # bench/object_store.py: moto in its own process
            proc, endpoint = start_server()
            try:
                boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
                loc = storage.location("s3://bench/in")
                with ThreadPoolExecutor(16) as pool:
                    list(pool.map(lambda k: loc.write_bytes(f"f{k:07d}.json", b'{"id": 1}\n'), range(args.s3_files)))
                measure("s3://bench/in", "s3://bench/chk", args.s3_files, args.per_entry, args.rounds, "S3 (moto)")
            finally:
                proc.kill()
                proc.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

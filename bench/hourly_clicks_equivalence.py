"""Output and state equivalence of two builds on hourly_clicks.py's query (a check, not a timing).

    .venv/bin/python bench/hourly_clicks_equivalence.py --base <commit> --dir DIR --format parquet [--files 20] [--mode append]

DIR holds the input files (e.g. `hourly_clicks.py --keep DIR` made DIR/json and DIR/parquet). The
query of hourly_clicks.py (watermark 15 minutes, 1-hour tumbling count per campaign, one file per
batch, 2 state partitions, available_now) runs on the first --files files once with the commit's
build (git archive, as bench/ab.py) and once with the working tree, each in its own process and
checkpoint. Compared: every batch's output (schema and rows, in order), every state changelog's
meta (without the attempt tokens), keys and values in file order, every snapshot's rows, and the
progress' input rows per batch. Prints "identical" or the first differences; exit status 1 if any.
"""
from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = r'''
import glob, os, pickle, re, sys, tempfile
src, fmt, nfiles, mode, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
import pyarrow as pa
import pyarrow.ipc as ipc
import increments as inc
from increments import functions as F
from state import files as sf
inp = tempfile.mkdtemp()
for f in sorted(os.listdir(src))[:nfiles]:
    os.symlink(os.path.join(src, f), os.path.join(inp, f))
chk = tempfile.mkdtemp()
batches = []
clicks = inc.read_stream.files(inp, fmt, "campaign_id STRING, user_id STRING, event_time TIMESTAMP", max_files_per_trigger=1)
q = (clicks.with_watermark("event_time", "15 minutes").group_by(F.window("event_time", "1 hour"), "campaign_id").count()
     .write_stream.output_mode(mode).option("state_partitions", 2)
     .foreach_batch(lambda t, b: batches.append((b, t.schema.to_string(), t.to_pylist())))
     .checkpoint_location(chk).trigger(available_now=True).start())
q.await_termination()
state = {}
for f in sorted(glob.glob(chk + "/state/**/*", recursive=True)):
    if os.path.isdir(f):
        continue
    rel = re.sub(r"[0-9a-f]{32}", "T", os.path.relpath(f, chk))
    data = open(f, "rb").read()
    if f.endswith(".changelog"):
        meta, keys, values = sf.decode_rows(data)
        state[rel] = ({k: v for k, v in meta.items() if k not in ("token", "parent")}, keys, values)
    elif f.endswith(".arrow"):
        state[rel] = ipc.open_file(pa.BufferReader(data)).read_all().to_pylist()
    else:
        state[rel] = len(data)
progress = [(p["batch_id"], p["num_input_rows"]) for p in q.recent_progress]
pickle.dump({"batches": batches, "state": state, "progress": progress}, open(out, "wb"))
'''


def main() -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ab import extract
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--dir", required=True, help="the directory holding json/ and parquet/ (hourly_clicks.py --keep)")
    ap.add_argument("--format", default="parquet", choices=["json", "parquet"])
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--mode", default="append", choices=["append", "update"])
    a = ap.parse_args()
    src = os.path.join(a.dir, a.format)
    script = os.path.join(tempfile.mkdtemp(), "run.py")
    with open(script, "w") as fh:
        fh.write(RUN)
    results = {}
    for name, tree in (("base", extract(a.base)), ("new", ROOT)):
        out = script + f".{name}.pkl"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, os.path.join(tree, "tests")]))
        subprocess.run([sys.executable, script, src, a.format, str(a.files), a.mode, out], env=env, cwd=tree, check=True)
        with open(out, "rb") as fh:
            results[name] = pickle.load(fh)
    b, n = results["base"], results["new"]
    bad = 0
    for part in ("batches", "state", "progress"):
        same = b[part] == n[part]
        bad += not same
        print(f"{part}: {'identical' if same else 'DIFFERENT'} ({len(b[part])} vs {len(n[part])})")
        if not same and part == "state":
            print("  first differing files:", [k for k in sorted(set(b[part]) | set(n[part]))
                                              if b[part].get(k) != n[part].get(k)][:5])
    rows = sum(len(x[2]) for x in n["batches"])
    print(f"{a.format} {a.mode}, {a.files} files: {len(n['batches'])} batches, {rows} output rows, "
          f"{len(n['state'])} state files: {'identical' if not bad else 'NOT identical'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

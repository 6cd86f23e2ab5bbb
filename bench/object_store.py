"""The hourly-clicks query with input, checkpoint and sink on an S3-compatible server, beside the same
query on local disk, in one run; prints the ratio and the object-store requests per batch.

    .venv/bin/python bench/object_store.py [--events 400000] [--files 20] [--rounds 2]

The S3 server is moto's (the tests' emulator) in its own process on a loopback port, behind a WSGI
wrapper that counts every request by method and by what it touched (the checkpoint's state files,
its seen-files log, its metadata and staging, the input files, the Delta sink). Both runs use the
same PostgreSQL log (needed by a remote checkpoint), so the ratio isolates the storage. The query:
watermark 15 minutes, 1-hour tumbling count per campaign, append mode, one file per batch,
AvailableNow, RocksDB state with changelog checkpointing (snapshot every 10 versions), 2 state
partitions, a Delta sink.

Goal (issue: object storage): at most 6 checkpoint requests per stateful batch between snapshots,
a snapshot's upload off the batch's critical path. A loopback emulator has none of a real store's
latency (tens of ms per request): the request counts are the figure that carries over.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SERVER = r'''
import json, sys, threading
from collections import Counter
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server
app = DomainDispatcherApplication(create_backend_app)
counts = Counter()
lock = threading.Lock()
def counting(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/__counts":
        with lock:
            body = json.dumps([[k[0], k[1], v] for k, v in counts.items()]).encode()
            counts.clear()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    q = environ.get("QUERY_STRING", "")
    if "list-type" in q:   # a listing: count it under its prefix
        from urllib.parse import parse_qs
        path = path.rstrip("/") + "/" + parse_qs(q).get("prefix", [""])[0] + "?list"
    with lock:
        counts[(environ["REQUEST_METHOD"], path)] += 1
    return app(environ, start_response)
srv = make_server("127.0.0.1", int(sys.argv[1]), counting, True, request_handler=MotoRequestHandler)
print("ready", flush=True)
srv.serve_forever()
'''


#: requests per batch between snapshots by kind, measured with this bench at a455489 (before the
#: Delta sink's cached snapshot and the seen-files change of issue 19), for the before/after columns
BEFORE = {"checkpoint: seen-files log": {"GET": 1.0, "PUT": 1.0}, "checkpoint: state": {"PUT": 2.6},
          "checkpoint: state (LIST)": {"GET": 0.1}, "delta sink": {"GET": 7.7, "PUT": 1.1},
          "delta sink (LIST)": {"GET": 3.2}, "input files": {"GET": 0.9, "HEAD": 2.9}}


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().strip() == "ready"
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret",
                      AWS_REGION="us-east-1", AWS_ALLOW_HTTP="true", AWS_EC2_METADATA_DISABLED="true")
    return proc, endpoint


def take_counts(endpoint: str) -> list[tuple[str, str, int]]:
    with urllib.request.urlopen(endpoint + "/__counts") as r:
        return [tuple(x) for x in json.loads(r.read())]


def classify(path: str) -> str:
    """What a request touched, from its path (/bucket/key?query)."""
    key = path.split("/", 2)[2] if path.count("/") >= 2 else ""
    if key.endswith("?list"):
        return classify(path[:-5]).split(" (")[0] + " (LIST)"
    if key.startswith("input"):
        return "input files"
    if key.startswith("out"):
        return "delta sink"
    if "/state/" in key or "%2Fstate%2F" in key:
        return "checkpoint: state"
    if "/sources/" in key or "%2Fsources%2F" in key:
        return "checkpoint: seen-files log"
    if "/staging/" in key or "%2Fstaging%2F" in key:
        return "checkpoint: staging"
    if key.startswith("chk"):
        return "checkpoint: metadata"
    return "other (list/bucket)"


def upload_dir(local: str, url: str) -> None:
    from increments import storage
    loc = storage.location(url)
    for name in sorted(os.listdir(local)):
        with open(os.path.join(local, name), "rb") as f:
            loc.write_bytes(name, f.read())


class PerBatchCounts:
    """A query listener that takes the server's request counts after every batch (in the query's
    thread: the batch's requests are done when its progress is reported)."""

    def __init__(self, endpoint: str):
        self.endpoint, self.batches = endpoint, []

    def on_query_started(self, event):
        take_counts(self.endpoint)

    def on_query_progress(self, progress):
        counts = take_counts(self.endpoint)
        self.batches.append((progress["batch_id"], counts))

    def on_query_terminated(self, event):
        pass

    def on_batch_step(self, *a):
        pass


def run_query(src: str, chk: str, out: str, log_url: str, listener=None) -> tuple[float, int, int]:
    import increments as inc
    from increments import functions as F
    from bench.hourly_clicks import SCHEMA
    clicks = inc.read_stream.files(src, "json", SCHEMA, max_files_per_trigger=1)
    q = (clicks.with_watermark("event_time", "15 minutes")
         .group_by(F.window("event_time", "1 hour"), "campaign_id").count()
         .write_stream.format("delta").output_mode("append").checkpoint_location(chk)
         .option("log_url", log_url).option("state_partitions", 2)
         .trigger(available_now=True))
    if listener is not None:
        q = q.listener(listener)
    t0 = time.perf_counter()
    query = q.start(out)
    query.await_termination()
    wall = time.perf_counter() - t0
    if query.exception() is not None:
        raise query.exception()
    batches = len(query.recent_progress)
    rows = sum(p["sink"]["num_output_rows"] for p in query.recent_progress)
    return wall, batches, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--detail", action="store_true", help="print every request of batch 5 (method, path)")
    ap.add_argument("--log-url", default=os.environ.get("INCREMENTS_TEST_PG",
                                                        "postgresql+psycopg://postgres@127.0.0.1:5432/test"))
    args = ap.parse_args()
    from bench.hourly_clicks import generate
    proc, endpoint = start_server()
    try:
        import boto3
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
        root = tempfile.mkdtemp(prefix="bench-objstore-")
        jdir, _ = generate(root, args.events, args.files)
        upload_dir(jdir, "s3://bench/input")
        take_counts(endpoint)
        local_t, remote_t, per_kind = [], [], {}
        for r in range(args.rounds + 1):          # round 0 warms up (imports, page cache)
            tag = uuid.uuid4().hex[:8]
            lt, lb, lrows = run_query(jdir, os.path.join(root, f"chk-{tag}"), os.path.join(root, f"out-{tag}"),
                                      args.log_url)
            take_counts(endpoint)
            per_batch = PerBatchCounts(endpoint)
            rt_, rb, rrows = run_query("s3://bench/input", f"s3://bench/chk-{tag}", f"s3://bench/out-{tag}",
                                       args.log_url, per_batch)
            assert (lb, lrows) == (rb, rrows), f"local {lb} batches/{lrows} rows, remote {rb}/{rrows}"
            if args.detail and r == 1:
                for b, c in per_batch.batches:
                    if b == 5:
                        for method, path, n in sorted(c, key=lambda x: x[1]):
                            print(f"  batch 5: {method:6s} {n} {path}")
            if r == 0:
                continue
            local_t.append(lt)
            remote_t.append(rt_)
            # batches 1.. between snapshots (versions not a multiple of 10); batch 0 creates the checkpoint
            plain = [c for b, c in per_batch.batches if b > 0 and b % 10 != 0]
            snaps = [c for b, c in per_batch.batches if b > 0 and b % 10 == 0]
            kinds: dict[str, dict[str, int]] = {}
            for counts in plain:
                for method, path, n in counts:
                    k = kinds.setdefault(classify(path), {})
                    k[method] = k.get(method, 0) + n
            per_kind = {k: {m: n / len(plain) for m, n in v.items()} for k, v in kinds.items()}
            snap_ck = statistics.mean(sum(n for _, p, n in c if classify(p).startswith("checkpoint"))
                                      for c in snaps) if snaps else 0.0
        lm, rm = statistics.median(local_t), statistics.median(remote_t)
        print(f"hourly clicks, {args.events:,} events in {args.files} JSON files, one file per batch, {rb} batches, "
              f"{rrows} windows out; PostgreSQL log for both")
        print(f"  local disk (input, checkpoint, Delta sink)  {lm:7.2f} s")
        print(f"  S3 emulator (input, checkpoint, Delta sink) {rm:7.2f} s   ratio remote/local {rm / lm:.2f}x")
        print("  object-store requests per batch between snapshots (remote run, mean; LIST counted as GET with "
              "list-type):")
        print(f"    {'kind':32s} {'before':>7s} {'now':>6s}  (now by method; before: a455489)")
        ck = ck_before = 0.0
        for kind in sorted(set(per_kind) | set(BEFORE)):
            total = sum(per_kind.get(kind, {}).values())
            before = sum(BEFORE.get(kind, {}).values())
            if kind.startswith("checkpoint"):
                ck += total
                ck_before += before
            detail = ", ".join(f"{m} {n:.1f}" for m, n in sorted(per_kind.get(kind, {}).items()))
            print(f"    {kind:32s} {before:7.1f} {total:6.1f}  ({detail})")
        allnow = sum(sum(v.values()) for v in per_kind.values())
        allbefore = sum(sum(v.values()) for v in BEFORE.values())
        print(f"    {'checkpoint, all':32s} {ck_before:7.1f} {ck:6.1f}  (goal: <= 6 per stateful batch between snapshots)")
        print(f"    {'every request':32s} {allbefore:7.1f} {allnow:6.1f}")
        print(f"  checkpoint requests of a snapshot batch (every 10th): {snap_ck:.1f} (the upload runs off the "
              "batch's critical path, on a background thread)")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()

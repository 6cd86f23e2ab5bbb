"""Helpers of the fault suite: input files, running the query subprocess, reading each sink."""
from __future__ import annotations

import datetime as dt
import glob
import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

SCRIPT = os.path.join(os.path.dirname(__file__), "fault_query.py")


def write_clicks(d: str, files: int = 4, per_file: int = 12) -> None:
    os.makedirs(d, exist_ok=True)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for f in range(files):
        with open(os.path.join(d, f"clicks-{f:03d}.json"), "w") as fh:
            for i in range(per_file):
                t = t0 + dt.timedelta(minutes=f * 12 + i)
                fh.write(json.dumps({"campaign_id": f"c{i % 3}", "event_time": t.isoformat().replace("+00:00", "Z")}) + "\n")


def run_query(config: dict, expect_kill: bool = False, machine: str | None = None) -> subprocess.CompletedProcess:
    """Run fault_query.py; with `machine`, in that fresh directory with its own TMPDIR (a start on
    another machine: no local cache of an earlier run survives)."""
    kw: dict = {}
    if machine is not None:
        os.makedirs(os.path.join(machine, "tmp"))
        env = dict(os.environ, TMPDIR=os.path.join(machine, "tmp"))
        env.pop("INCREMENTS_LOCAL_DIR", None)
        kw = {"cwd": machine, "env": env}
    p = subprocess.run([sys.executable, SCRIPT, json.dumps(config)], capture_output=True, text=True, timeout=300,
                       **kw)
    if expect_kill:
        assert p.returncode == -9, f"expected a SIGKILL, got {p.returncode}: {p.stderr[-2500:]}"
    else:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def sink_rows(sink: str, target: str, pg_url: str | None = None, catalog: dict | None = None) -> list[tuple]:
    """The sink's rows as sorted (window start ISO, campaign, count) tuples (duplicates kept)."""
    if sink == "foreach_batch":
        rows = [(r["start"], r["campaign_id"], r["count"]) for f in glob.glob(os.path.join(target, "*.json"))
                for r in json.load(open(f))]
    elif sink == "postgres":
        eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
        with eng.connect() as c:
            got = c.execute(sa.text(f'SELECT window_start, campaign_id, count FROM "{target}"')).all()
        rows = [(r[0].isoformat(), r[1], r[2]) for r in got]
    elif sink == "iceberg":
        from pyiceberg.catalog import load_catalog
        t = load_catalog("increments", **catalog).load_table(target).scan().to_arrow()
        rows = [(r["window"]["start"].isoformat(), r["campaign_id"], r["count"]) for r in t.to_pylist()]
    else:
        if sink == "delta":
            from deltalake import DeltaTable
            t = DeltaTable(target, storage_options=s3_options() if target.startswith("s3://") else None
                           ).to_pyarrow_table()
        else:
            import increments as inc
            t = inc.read.parquet_sink(target)
        rows = [(r["window"]["start"].isoformat(), r["campaign_id"], r["count"]) for r in t.to_pylist()]
    return sorted(rows)


def s3_options() -> dict:
    """delta-rs options for the test S3 server (the s3_server fixture's environment)."""
    return {k: os.environ[k] for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
                                       "AWS_ALLOW_HTTP")}


def upload_dir(local_dir: str, url: str) -> None:
    """Copy the files of a local directory under an object-store URL."""
    from increments import storage
    loc = storage.location(url)
    for name in sorted(os.listdir(local_dir)):
        with open(os.path.join(local_dir, name), "rb") as f:
            loc.write_bytes(name, f.read())


@pytest.fixture
def fault_env(tmp_path, pg_url):
    write_clicks(str(tmp_path / "in"))
    return {"input": str(tmp_path / "in"), "root": tmp_path, "pg_url": pg_url}

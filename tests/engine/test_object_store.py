"""A query that lives on an object store (moto's S3 server on loopback, PostgreSQL log).

* Two "machines": a windowed aggregation with input, checkpoint and Delta sink on S3 and the log in
  PostgreSQL runs in two starts, each a subprocess with its own fresh working directory and TMPDIR
  (nothing on local disk survives between them); its output equals the same query on local disk.
* A remote checkpoint with the embedded SQLite log, and unknown schemes, are refused at start()
  before anything is written, naming the reason.
* A secret given in storage_options appears in no progress, history or error.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

import increments as inc
from increments import storage
from increments.errors import AnalysisException

SCRIPT = os.path.join(os.path.dirname(__file__), "objstore_query.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _clicks(f: int, per_file: int = 12) -> bytes:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    lines = []
    for i in range(per_file):
        t = t0 + dt.timedelta(minutes=f * 12 + i)
        lines.append(json.dumps({"campaign_id": f"c{i % 3}", "event_time": t.isoformat().replace("+00:00", "Z")}))
    return ("\n".join(lines) + "\n").encode()


def _put_inputs(url: str, files: range) -> None:
    loc = storage.location(url)
    for f in files:
        loc.write_bytes(f"clicks-{f:03d}.json", _clicks(f))


def _run(config: dict, machine: str) -> subprocess.CompletedProcess:
    """One start on a fresh "machine": its own empty working directory and TMPDIR."""
    os.makedirs(os.path.join(machine, "tmp"))
    env = dict(os.environ, TMPDIR=os.path.join(machine, "tmp"), PYTHONPATH=REPO)
    env.pop("INCREMENTS_LOCAL_DIR", None)
    p = subprocess.run([sys.executable, SCRIPT, json.dumps(config)], capture_output=True, text=True, timeout=300,
                       cwd=machine, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def _delta_rows(target: str) -> list[tuple]:
    from deltalake import DeltaTable
    t = DeltaTable(target, storage_options=_delta_options() if storage.is_remote(target) else None)
    return sorted((r["window"]["start"].isoformat(), r["campaign_id"], r["count"]) for r in t.to_pyarrow_table().to_pylist())


def _delta_options() -> dict:
    return {"AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"], "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"], "AWS_REGION": "us-east-1"}


def test_two_machines_on_s3_match_local_disk(tmp_path, s3_bucket, pg_url):
    remote = {"input": f"{s3_bucket}/in", "checkpoint": f"{s3_bucket}/chk", "target": f"{s3_bucket}/out",
              "log_url": pg_url}
    local = {"input": str(tmp_path / "local_in"), "checkpoint": str(tmp_path / "local_chk"),
             "target": str(tmp_path / "local_out")}
    for tag, cfg in (("s3", remote), ("disk", local)):
        _put_inputs(cfg["input"], range(0, 3))
        _run(cfg, str(tmp_path / f"{tag}_machine1"))
        _put_inputs(cfg["input"], range(3, 6))
        _run(cfg, str(tmp_path / f"{tag}_machine2"))
    expected = _delta_rows(local["target"])
    assert len(expected) >= 6, "the workload must close several windows"
    assert _delta_rows(remote["target"]) == expected
    # everything lives under the checkpoint URL; the second machine found the first one's state there
    chk = storage.location(remote["checkpoint"])
    names = [o.name for o in chk.list()]
    assert "metadata.json" in names and "conf.json" in names
    assert any(n.startswith("state/") for n in names) and any(n.startswith("sources/0/") for n in names)
    assert not any(n.endswith("log.sqlite") for n in names)
    meta = chk.read_json("metadata.json")
    from increments.checkpoint.log import BatchLog
    log = BatchLog(pg_url, meta["id"])
    hist = log.history()
    assert all(c is not None for _, c in hist) and len(hist) >= 6
    assert all(c.extra.get("state_tokens") for _, c in hist)   # every batch names its state files


def _windowed(input_url: str):
    from increments import functions as F
    return (inc.read_stream.files(input_url, "json", "campaign_id STRING, event_time TIMESTAMP")
            .with_watermark("event_time", "5 minutes")
            .group_by(F.window("event_time", "10 minutes"), "campaign_id").count())


@pytest.mark.parametrize("log_url", [None, "sqlite:///{tmp}/log.sqlite"])
def test_remote_checkpoint_with_sqlite_log_is_refused(tmp_path, s3_bucket, monkeypatch, log_url):
    monkeypatch.delenv("INCREMENTS_LOG_URL", raising=False)
    _put_inputs(f"{s3_bucket}/in", range(1))
    w = _windowed(f"{s3_bucket}/in").write_stream.format("memory").query_name("refused") \
        .checkpoint_location(f"{s3_bucket}/chk")
    if log_url:
        w = w.option("log_url", log_url.format(tmp=tmp_path))
    with pytest.raises(AnalysisException) as ei:
        w.start()
    msg = str(ei.value)
    assert "PostgreSQL" in msg and "log_url" in msg and "INCREMENTS_LOG_URL" in msg
    assert not storage.location(f"{s3_bucket}/chk").list(), "nothing may be written before the refusal"


def test_unknown_schemes_are_refused_naming_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    frame = inc.read_stream.files(str(tmp_path / "in"), "json", "id BIGINT")
    with pytest.raises(storage.UnknownSchemeError, match=r"'foo://'"):
        frame.write_stream.format("memory").query_name("u1").checkpoint_location("foo://bucket/chk").start()
    with pytest.raises(storage.UnknownSchemeError, match=r"'hdfs://'"):
        frame.write_stream.format("delta").checkpoint_location(str(tmp_path / "chk")).start("hdfs://nn/out")
    assert sorted(os.listdir(tmp_path)) == ["in"], "nothing may be written before the refusal"


def test_no_secret_in_progress_history_or_errors(tmp_path, s3_bucket, pg_url, capsys):
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    opts = {"aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": secret}
    _put_inputs(f"{s3_bucket}/in", range(3))
    # the Delta sink runs in a subprocess: delta-rs holds the GIL in its object-store calls, which
    # would starve the moto server's threads in this process
    cfg = {"input": f"{s3_bucket}/in", "checkpoint": f"{s3_bucket}/chk", "target": f"{s3_bucket}/out",
           "log_url": pg_url, "storage_options": opts, "progress": str(tmp_path / "progress.json")}
    p = _run(cfg, str(tmp_path / "m1"))
    progress = (tmp_path / "progress.json").read_text()
    assert json.loads(progress) and secret not in progress
    assert secret not in p.stdout + p.stderr
    from increments import cli
    assert cli.main(["history", f"{s3_bucket}/chk", "--log-url", pg_url,
                     "--storage-option", f"aws_secret_access_key={secret}"]) == 0
    out = capsys.readouterr().out
    assert "clicks_by_window" in out and secret not in out
    # errors: a checkpoint in a bucket that does not exist, the secret in its storage_options
    w = (_windowed(f"{s3_bucket}/in").write_stream.format("memory").query_name("secretive")
         .option("log_url", pg_url).option("storage_options", opts)
         .checkpoint_location("s3://no-such-bucket-increments/chk"))
    with pytest.raises(Exception) as ei:
        w.start().await_termination()
    assert "no-such-bucket-increments" in str(ei.value)
    assert secret not in str(ei.value) and secret not in repr(ei.value)
    # the state reader resolves the committed tokens from the log
    state = inc.read_state(f"{s3_bucket}/chk", "0", log_url=pg_url, storage_options=opts)
    assert state.num_rows > 0


def test_failure_messages_are_redacted(tmp_path):
    secret = "s3cr3t-" + os.urandom(6).hex()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text('{"id": 1}\n')

    def sink(table, batch_id):
        raise ValueError(f"the store said: bad key {secret}")
    q = (inc.read_stream.files(str(tmp_path / "in"), "json", "id BIGINT").write_stream.foreach_batch(sink)
         .checkpoint_location(str(tmp_path / "chk")).option("storage_options", {"aws_secret_access_key": secret})
         .trigger(available_now=True).start())
    with pytest.raises(inc.StreamingQueryException) as ei:
        q.await_termination()
    assert "bad key ***" in str(ei.value) and secret not in str(ei.value)

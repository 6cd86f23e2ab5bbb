"""PostgreSQL (log and sink) goes down in the middle of a batch: the batch fails clearly, the next
attempt after the server is back succeeds, nothing is lost or duplicated.

This test stops and starts the real local PostgreSQL server (pg_ctlcluster), so it runs last in
the fault suite and always restarts the server, even when it fails.
"""
from __future__ import annotations

import glob
import os
import subprocess
import time
import uuid

import pytest

import increments as inc
from increments import functions as F

from fault_testutil import sink_rows, write_clicks

CLUSTER = (sorted(os.listdir("/etc/postgresql"))[-1] if os.path.isdir("/etc/postgresql") else None)


def _pg(action: str) -> None:
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", CLUSTER, "main", action]
                   + (["-m", "fast"] if action == "stop" else []), check=True, capture_output=True, timeout=60)
    if action == "start":
        for _ in range(60):
            if subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"]).returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError("PostgreSQL did not come back")


def _query(inp, chk, pg_url, table, listener=None):
    w = (inc.read_stream.files(inp, "json", "campaign_id STRING, event_time TIMESTAMP", max_files_per_trigger=1)
         .with_watermark("event_time", "5 minutes")
         .group_by(F.window("event_time", "10 minutes"), "campaign_id").count()
         .write_stream.output_mode("append").format("postgres").option("url", pg_url).option("table", table)
         .option("log_url", pg_url).checkpoint_location(chk).query_name("pg_outage").trigger(available_now=True))
    if listener:
        w = w.listener(listener)
    return w.start()


@pytest.mark.faults
@pytest.mark.skipif(CLUSTER is None or os.geteuid() != 0, reason="needs the local PostgreSQL cluster and root")
def test_postgres_down_mid_batch_then_back(tmp_path, pg_url):
    inp = str(tmp_path / "in")
    write_clicks(inp)
    clean_table, table = f"clean_{uuid.uuid4().hex[:8]}", f"outage_{uuid.uuid4().hex[:8]}"
    _query(inp, str(tmp_path / "chk_clean"), pg_url, clean_table).await_termination()
    expected = sink_rows("postgres", clean_table, pg_url)

    class StopServer(inc.StreamingQueryListener):
        def on_batch_step(self, name, batch_id, step):
            if batch_id == 1 and step == "process":
                _pg("stop")
    try:
        q = _query(inp, str(tmp_path / "chk"), pg_url, table, StopServer())
        with pytest.raises(inc.StreamingQueryException) as ei:
            q.await_termination()
        assert "batch 1" in str(ei.value) and "write step" in str(ei.value)
    finally:
        _pg("start")
    q = _query(inp, str(tmp_path / "chk"), pg_url, table)
    q.await_termination()
    assert q.recent_progress[0]["batch_id"] == 1 and q.recent_progress[0]["redo"] is True
    assert sink_rows("postgres", table, pg_url) == expected

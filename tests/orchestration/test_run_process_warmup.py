"""What a batch run's process does to start faster (issue 29 item 5; speed itself is measured in
bench/dagster_overhead.py): its ops write events on the instance's open PostgreSQL connections
instead of a new connection per statement (the same server backends serve a second batch), and
the engine's modules are imported in the background in a run's process only (a multiprocessing
child, as Dagster's run worker is), never where the code location is loaded for sensors and the UI."""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import subprocess
import sys

import dagster as dg
import sqlalchemy as sa

from orch_testutil import PG_ADMIN_URL, create_db, drop_db, write_files

import increments as inc
from orchestration import build_definitions, preload
from orchestration.dagster_internals import POOLED
from orchestration.home import prepare_home

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _query(root: str):
    def warm_copy():
        return (inc.read_stream.files(os.path.join(root, "landing", "warm_copy"), format="json",
                                      schema="id BIGINT, name STRING", max_files_per_trigger=1)
                .write_stream.format("parquet").checkpoint_location(os.path.join(root, "chk"))
                .query_name("warm_copy").trigger(processing_time="1 minute"))
    return warm_copy


def _admin(sql: str, db: str) -> list:
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        rows = c.execute(sa.text(sql), {"d": db}).fetchall()
    admin.dispose()
    return rows


def _open_connections(db: str) -> int:
    return len(_admin("SELECT pid FROM pg_stat_activity WHERE datname = :d", db))


def _sessions(db: str) -> int:
    """Connections ever made to `db` (PostgreSQL 14+; a closed one is counted when it ends)."""
    return int(_admin("SELECT sessions FROM pg_stat_database WHERE datname = :d", db)[0][0])


def test_batch_ops_write_on_the_instances_open_connections(tmp_path, monkeypatch):
    root = str(tmp_path)
    db, url = create_db("inc_warm")
    try:
        env = prepare_home(os.path.join(root, "home"), pg_url=url.replace("+psycopg", "+psycopg2"))
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        write_files(root, "warm_copy", 2)
        defs = build_definitions([(_query(root), {"path": os.path.join(root, "lake"), "sensor_status": "stopped"})],
                                 asset_root=root)
        job = defs.resolve_job_def("warm_copy_batch")
        with dg.DagsterInstance.get() as inst:
            assert not getattr(inst, POOLED, False)
            first = job.execute_in_process(instance=inst)
            assert inst.get_run_by_id(first.run_id).tags["increments/outcome"] == "committed"
            assert getattr(inst, POOLED, False)           # the first op pooled the storages
            assert _open_connections(db) >= 1             # kept open (idle) between statements
            before = _sessions(db)
            second = job.execute_in_process(instance=inst)
            run = inst.get_run_by_id(second.run_id)
            events = inst.all_logs(second.run_id)
            assert run.tags["increments/outcome"] == "committed"
            assert len([e for e in events if e.dagster_event and
                        e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"]) == 5
            # the second batch's events (2-3 statements each) and tags went through the open
            # connections: a handful of new connections (a second one while two are in use at
            # once), not one per statement as Dagster's storages make by default
            assert len(events) >= 40
            assert _sessions(db) - before < 15, (_sessions(db) - before, len(events))
    finally:
        drop_db(db)


def test_engine_modules_preload_in_a_run_process_only():
    # Dagster's run worker is a multiprocessing child of the code server: there, preload is wanted
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(preload.wanted).result(timeout=120) is True
    # where the code location is loaded for sensors and the UI (a plain process): not wanted, and
    # loading definitions imports none of the engine's heavy modules
    code = ("import os, sys, tempfile; root = tempfile.mkdtemp(); os.environ['INCREMENTS_BENCH_DIR'] = root; "
            "import runpy; runpy.run_path('bench/dagster_bench_location.py'); "
            "from orchestration import preload; "
            "print(preload.wanted(), preload._thread is not None, 'increments.execution.steps' in sys.modules, "
            "'duckdb' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "INCREMENTS_PRELOAD"}
    env["PYTHONPATH"] = REPO
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "False", "False", "False"], out.stdout
    # INCREMENTS_PRELOAD=1 (as in a run's process): the same load starts the background import,
    # and once an op waited for it the engine's modules are there
    code1 = code.replace("print(", "preload.wait(); print(len(preload._failed), ")
    out = subprocess.run([sys.executable, "-c", code1], cwd=REPO, env={**env, "INCREMENTS_PRELOAD": "1"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["0", "True", "True", "True", "True"], out.stdout + out.stderr[-2000:]

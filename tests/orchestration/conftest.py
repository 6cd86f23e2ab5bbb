"""A real Dagster instance for the orchestration tests: PostgreSQL storage (a fresh database per
session), `dagster-daemon run` and `dagster-webserver` subprocesses on free loopback ports, the
code location tests/orchestration/dagster_queries.py. Source files are written before start so the
sensor and the per-minute schedule begin draining at once."""
from __future__ import annotations

import json
import os
import uuid

import pytest
import sqlalchemy as sa

PG_ADMIN_URL = os.environ.get("INCREMENTS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
from orch_util import ROWS_PER_FILE, write_files  # noqa: E402


def _create_db(prefix: str) -> tuple[str, str]:
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return name, PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def _drop_db(name: str) -> None:
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def dagster_env(tmp_path_factory):
    from orchestration.home import prepare_home
    from orchestration.local_instance import LocalDagster
    root = str(tmp_path_factory.mktemp("orch"))
    dag_db, dag_url = _create_db("inc_dagster")
    log_db, log_url = _create_db("inc_log")
    home = os.path.join(root, "dagster_home")
    env = prepare_home(home, pg_url=dag_url.replace("postgresql+psycopg://", "postgresql+psycopg2://"))
    env.update(INCREMENTS_TEST_DIR=root, INCREMENTS_LOG_URL=log_url, PYTHONPATH=REPO)
    ws = os.path.join(root, "workspace.yaml")
    with open(ws, "w") as f:
        f.write(f"load_from:\n  - python_file:\n      relative_path: {os.path.join(HERE, 'dagster_queries.py')}\n"
                f"      attribute: defs\n      working_directory: {REPO}\n      location_name: increments_test\n")
    expected = {q: write_files(root, q, 3) for q in ("sensor_copy", "drain_copy")}
    os.environ["INCREMENTS_TEST_DIR"] = root
    inst = LocalDagster(home, ws, env=env, cwd=REPO)
    inst.start(timeout=180)
    try:
        yield {"dagster": inst, "root": root, "log_url": log_url, "expected": expected, "env": env}
    finally:
        inst.stop()
        from increments.checkpoint.log import _ENGINES
        for u in [u for u in _ENGINES if u == log_url]:
            _ENGINES.pop(u).dispose()
        _drop_db(dag_db)
        _drop_db(log_db)

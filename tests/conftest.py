"""Shared fixtures: log URLs for both backends (SQLite file and the real PostgreSQL here)."""
from __future__ import annotations

import os
import uuid

import pytest
import sqlalchemy as sa

PG_ADMIN_URL = os.environ.get("INCREMENTS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _pg_available() -> bool:
    try:
        eng = sa.create_engine(PG_ADMIN_URL, poolclass=sa.pool.NullPool)
        with eng.connect() as c:
            c.execute(sa.text("select 1"))
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def pg_url() -> str:
    """A fresh PostgreSQL schema-free database URL for this test session (the real server)."""
    if not _pg_available():
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: start it "
                    "(pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start)")
    name = "inc_test_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    yield url
    from increments.checkpoint.log import _ENGINES
    for u, eng in list(_ENGINES.items()):
        if u == url:
            eng.dispose()
            del _ENGINES[u]
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", "postgres"])
def log_url(request, tmp_path) -> str:
    """Each test using this runs twice: on an SQLite file and on the real PostgreSQL."""
    if request.param == "sqlite":
        return "sqlite:///" + str(tmp_path / "log.sqlite")
    return request.getfixturevalue("pg_url")
from broker import *  # noqa: F401,F403  (the kafka_broker fixture; tests/broker.py)
from object_store import s3_bucket, s3_server  # noqa: E402,F401  (moto's S3 server; tests/object_store.py)

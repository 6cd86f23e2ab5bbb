"""Helpers shared by the orchestration tests."""
import json
import os
import uuid

import sqlalchemy as sa

PG_ADMIN_URL = os.environ.get("INCREMENTS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

ROWS_PER_FILE = 50


def write_files(root: str, query: str, n: int, start: int = 0) -> int:
    d = os.path.join(root, "landing", query)
    os.makedirs(d, exist_ok=True)
    for f in range(start, start + n):
        with open(os.path.join(d, f"part-{f:04d}.json"), "w") as out:
            for r in range(ROWS_PER_FILE):
                out.write(json.dumps({"id": f * 1000 + r, "name": f"{query}-{f}-{r}"}) + "\n")
    return n * ROWS_PER_FILE


def create_db(prefix: str) -> tuple[str, str]:
    """A fresh PostgreSQL database named <prefix>_<random>: (name, SQLAlchemy URL)."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return name, PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def drop_db(name: str) -> None:
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()

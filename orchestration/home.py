"""Prepare a DAGSTER_HOME from the shipped orchestration/dagster.yaml.

    python -m orchestration.home .dagster            # PostgreSQL storage ($DAGSTER_PG_URL or the default)
    python -m orchestration.home .dagster --sqlite   # local SQLite storage, no server needed (demo)
    python -m orchestration.home .dagster --celery   # batch runs on warm Celery workers (orchestration/celery.py)

`bash dev.sh ui` runs the SQLite variant and starts `dagster dev` on it.

PostgreSQL: creates the database of the URL when it is missing, and prints the two exports to use
before `dagster dev -w workspace.yaml`.
"""
from __future__ import annotations

import os
import re
import sys

import sqlalchemy as sa
from psycopg import sql

DEFAULT_PG_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/dagster"
SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dagster.yaml")


def instance_yaml(sqlite: bool = False, celery: bool = False) -> str:
    """The shipped orchestration/dagster.yaml; with sqlite=True its storage section is dropped (SQLite
    in the home); with celery=True runs launch on warm Celery workers (celery.instance_section)."""
    with open(SHIPPED) as f:
        text = f.read()
    if sqlite:
        text = re.sub(r"(?m)^storage:\n(?:  .*\n)+", "", text)
    if celery:
        from .celery import instance_section  # noqa: PLC0415 - optional extra increments[celery]: orchestration.celery loads celery
        text += "\n" + instance_section()
    return text


def ensure_database(url: str) -> None:
    """CREATE DATABASE for the URL's database name if it does not exist (PostgreSQL, trust auth)."""
    # Dagster's storage URL names psycopg2 (dagster-postgres' driver); this connection is increments' own: psycopg 3
    u = sa.engine.make_url(url)
    name = u.database
    admin = sa.create_engine(u.set(drivername="postgresql+psycopg", database="postgres"), isolation_level="AUTOCOMMIT",
                             poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        if not c.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first():
            c.connection.driver_connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin.dispose()


def prepare_home(home: str, sqlite: bool = False, pg_url: str | None = None, celery: bool = False) -> dict[str, str]:
    """Write <home>/dagster.yaml; return the environment to run dagster with."""
    home = os.path.abspath(home)
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, "dagster.yaml"), "w") as f:
        f.write(instance_yaml(sqlite, celery))
    env = {"DAGSTER_HOME": home}
    if not sqlite:
        url = pg_url or os.environ.get("DAGSTER_PG_URL") or DEFAULT_PG_URL
        ensure_database(url)
        env["DAGSTER_PG_URL"] = url
    return env


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    sqlite, celery = "--sqlite" in args, "--celery" in args
    args = [a for a in args if a not in ("--sqlite", "--celery")]
    env = prepare_home(args[0] if args else ".dagster", sqlite=sqlite, celery=celery)
    for k, v in env.items():
        print(f"export {k}={v}")
    print("dagster dev -w workspace.yaml")
    if celery:
        print("python -m orchestration.celery worker -Q increments-runs -n runs@%h   # batch runs; same DAGSTER_HOME")
        print("python -m orchestration.celery worker -Q increments-p0,dagster -n p0@%h   # executor=\"celery\" steps, "
              "one per partition group")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

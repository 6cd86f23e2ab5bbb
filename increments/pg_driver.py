"""PostgreSQL's one driver in increments: psycopg 3 (the dependency `psycopg[binary]`), for the
offsets/commits log, the PostgreSQL sinks and an Iceberg SQL catalog. (Dagster's own storage is
dagster-postgres', on the psycopg2 it requires: its URL stays postgresql+psycopg2://, measured:
its webserver fails with "the connection is closed" on psycopg 3.)

`psycopg_url(url)`: a SQLAlchemy URL of PostgreSQL that names no driver (`postgresql://...`,
`postgres://...`) gets psycopg's (`postgresql+psycopg://...`): SQLAlchemy alone would load
psycopg2, a second driver. A URL that names a driver keeps it; any other URL (sqlite) is returned
as it is. `driver(url)`: the driver a PostgreSQL URL uses after that ('' for other databases).
Light: no driver is imported here.
"""
from __future__ import annotations

DRIVER = "psycopg"


def psycopg_url(url: str) -> str:
    scheme, sep, rest = str(url).partition("://")
    if sep and scheme.lower() in ("postgresql", "postgres"):
        return f"postgresql+{DRIVER}://{rest}"
    return url


def driver(url: str) -> str:
    """'psycopg' for postgresql:// and postgresql+psycopg://, the named driver otherwise; '' when
    the URL is not PostgreSQL's."""
    scheme = psycopg_url(url).partition("://")[0].lower()
    backend, _, name = scheme.partition("+")
    return name if backend == "postgresql" else ""

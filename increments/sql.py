"""DuckDB connections: one per thread, UTC session time zone, Arrow in and out."""
from __future__ import annotations

import threading

import duckdb
import pyarrow as pa

_local = threading.local()


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    con = getattr(_local, "con", None)
    if con is None:
        con = duckdb.connect()
        con.execute("SET TimeZone='UTC'")
        _local.con = con
    return con


def run_sql(sql: str, tables: dict[str, pa.Table], con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """Run `sql` with each Arrow table registered under its name; return an Arrow table."""
    con = con or duckdb_connection()
    for name, t in tables.items():
        con.register(name, t)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        for name in tables:
            con.unregister(name)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'

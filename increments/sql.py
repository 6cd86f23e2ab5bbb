"""DuckDB connections: one in-memory database per process, a cursor (its own connection: its own
registered tables and settings) per thread, UTC session time zone, Arrow in and out.

Opening a DuckDB database costs 15-30 ms, a cursor on an open one microseconds; a query runs on a
new thread every start(), so the database is shared and only the cursor is per thread."""
from __future__ import annotations

import threading

import duckdb
import pyarrow as pa

from .identifiers import duckdb_ident

_local = threading.local()
_db: duckdb.DuckDBPyConnection | None = None
_db_lock = threading.Lock()


#: Spark's try_divide / try_mod: NULL for a zero divisor (the functions a DIVIDE_BY_ZERO error names)
MACROS = ("CREATE OR REPLACE MACRO try_divide(a, b) AS CASE WHEN b = 0 THEN NULL ELSE a / b END",
          "CREATE OR REPLACE MACRO try_mod(a, b) AS CASE WHEN b = 0 THEN NULL ELSE a % b END")


def duckdb_connection(strict: bool = False) -> duckdb.DuckDBPyConnection:
    """This thread's cursor. strict=True: one with DuckDB's IEEE floating-point mode off, where a
    division or remainder by zero raises (Spark 4's ANSI DIVIDE_BY_ZERO) instead of giving
    Infinity/NaN -- and so do sqrt/ln/acos/pow... outside their domain, which the default cursor
    answers with NaN/Infinity as Spark does (operators/stateless.py runs a stage strictly, and again
    on the default cursor when the strict run failed for another reason)."""
    global _db
    attr = "strict_con" if strict else "con"
    con = getattr(_local, attr, None)
    if con is None:
        with _db_lock:
            if _db is None:
                _db = duckdb.connect()
                for m in MACROS:
                    _db.execute(m)
            con = _db.cursor()
        con.execute("SET TimeZone='UTC'")
        if strict:
            con.execute("SET ieee_floating_point_ops=false")
        setattr(_local, attr, con)
    return con


def duckdb_plain_connection() -> duckdb.DuckDBPyConnection:
    """This thread's cursor with DuckDB's optimizer off (`PRAGMA disable_optimizer`), otherwise as
    duckdb_connection(): for statements that have nothing to optimize (a projection of one table
    function, sources/file_formats.py's small JSON scans), where the optimizer's fixed cost
    (~0.6-0.9 M instructions a statement) is most of the planning. The results are the same (DuckDB's
    optimizers do not change them); only the plan, and so the speed of a large input, may differ."""
    con = getattr(_local, "plain_con", None)
    if con is None:
        duckdb_connection()               # opens the database if this is its first use
        with _db_lock:
            con = _db.cursor()
        con.execute("SET TimeZone='UTC'")
        con.execute("PRAGMA disable_optimizer")
        _local.plain_con = con
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


def run_sql_ansi(sql: str, tables: dict[str, pa.Table]) -> pa.Table:
    """run_sql with Spark 4's ANSI division: on the strict cursor, where a division or remainder
    by zero raises (is_division_by_zero tells that error); a failure for any other reason runs
    again on the default cursor, whose answer (sqrt(-1) = NaN, as Spark's) or error counts."""
    try:
        return run_sql(sql, tables, duckdb_connection(strict=True))
    except Exception as e:  # noqa: BLE001 - re-raised, or asked again below
        if is_division_by_zero(e):
            raise
    return run_sql(sql, tables)


def is_division_by_zero(e: BaseException) -> bool:
    """DuckDB's error of a division or remainder by zero (any type on a strict cursor; an integer
    or decimal remainder on the default one)."""
    return isinstance(e, duckdb.InvalidInputException) and "Division by zero" in str(e)


quote_ident = duckdb_ident      # the one DuckDB quoting helper (increments/identifiers.py)

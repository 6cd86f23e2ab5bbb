"""Names: the one quoting helper per SQL dialect, and the validation of the names a user gives.

Quoting (a name is always data, never SQL: any character is allowed in it):
* ``duckdb_ident(name)``: DuckDB's quoted identifier (double quotes, a quote doubled); the one
  helper for every SQL text increments gives DuckDB (``increments.sql.quote_ident`` is this one).
* PostgreSQL: statements are composed with psycopg.sql, names as ``sql.Identifier``
  (sinks/postgres.py: ``table_ident`` for ``schema.table``, ``ident_list``), never quoted by hand.
* ``delta_ident(name)``: a column in a delta-rs (DataFusion) predicate (backquotes, one doubled).

Validation: ``check_query_name(name)``: letters, digits, ``_`` and ``-``, starting with a letter or
a digit, at most 128 characters: a query name becomes a Dagster job, sensor and asset name, a
memory table, a log row and a path part.
"""
from __future__ import annotations

import re

from .errors import AnalysisException

QUERY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def duckdb_ident(name: str) -> str:
    return '"' + str(name).replace('"', '""') + '"'


def delta_ident(name: str) -> str:
    return "`" + str(name).replace("`", "``") + "`"


class InvalidNameError(AnalysisException, ValueError):
    """A name given to increments (a query name, a schema's column) cannot be used; what is allowed is said."""


def check_query_name(name: object, where: str = "query_name") -> str:
    """`name` when it is a valid query name; InvalidNameError saying what is allowed otherwise."""
    if not isinstance(name, str) or not QUERY_NAME.match(name):
        raise InvalidNameError(f"{where}({name!r}): a query name is 1 to 128 letters, digits, '_' and '-', starting with a "
                         "letter or a digit (it names the Dagster job, sensor and assets, the memory table and the "
                         "log's rows), e.g. 'clicks_per_hour'")
    return name

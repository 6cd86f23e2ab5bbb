"""Names: the one quoting helper per SQL dialect, and the validation of the names a user gives.

Quoting (a name is always data, never SQL: any character is allowed in it):
* ``duckdb_ident(name)``: DuckDB's quoted identifier (double quotes, a quote doubled).
* ``pg_ident(name)`` / ``pg_table(name)``: PostgreSQL's quoted identifier, and a table name
  ``schema.table`` or ``table`` quoted part by part, for SQL sent to the driver as it is (COPY).
* ``pg_text_ident`` / ``pg_text_table``: the same inside ``sqlalchemy.text(...)``, whose ``:name``
  bind parameters would otherwise match a colon inside the name (a table named ``:param``): the
  colons are escaped (``\\:``), which text() turns back into ``:``.
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


def pg_ident(name: str) -> str:
    return '"' + str(name).replace('"', '""') + '"'


def pg_table(name: str) -> str:
    """`schema.table` or `table`, each part quoted (a dot always separates the schema)."""
    return ".".join(pg_ident(p) for p in str(name).split("."))


def pg_text_ident(name: str) -> str:
    return pg_ident(name).replace(":", "\\:")


def pg_text_table(name: str) -> str:
    return pg_table(name).replace(":", "\\:")


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

"""MetadataLog: one SQL table of versioned JSON entries keyed by (query id, batch id).

The same schema and code path serve the embedded SQLite default and PostgreSQL. The primary key
(query_id, batch_id) is the fence between two runners of one query: only one insert of an entry
for a batch can succeed. Each entry carries a format version (`entry_version`), as Spark puts a
version line atop each log file, so a later release can read (or refuse) older entries.

Columns: query_id, batch_id, entry_version, body (JSON text), owner (the run id that wrote or
claimed the entry), attempt (how many runs have claimed it), created_at (ms since epoch).

The statements a batch runs (insert, claim, owner, get, latest) go through one DBAPI connection per
log (`LogConnection`, opened through the SQLAlchemy engine, so its connect events apply: SQLite's
WAL mode) in autocommit mode: every statement is one round trip and, when it writes, one atomic
transaction (one durable commit). SQLAlchemy Core (statement building, compile cache, a pool
checkout, and for PostgreSQL a ping, BEGIN and COMMIT/ROLLBACK per call) cost about 0.3 ms and up
to four round trips per statement; the table definitions stay SQLAlchemy's (DDL, `entries`, tools).
"""
from __future__ import annotations

import errno
import json
import os
import sqlite3
import threading
import time
import weakref
from typing import Any, Callable

import sqlalchemy as sa

from ..errors import CheckpointAccessError

_METADATA = sa.MetaData()
_COLUMNS = ("query_id", "batch_id", "entry_version", "body", "owner", "attempt", "created_at")


def _table(name: str) -> sa.Table:
    existing = _METADATA.tables.get(name)
    if existing is not None:
        return existing
    return sa.Table(
        name, _METADATA,
        sa.Column("query_id", sa.String(64), primary_key=True),
        sa.Column("batch_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("entry_version", sa.Integer, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, default=1),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )


_DDL: dict[tuple[str, str], str] = {}


def create_table(engine: sa.Engine, table: sa.Table) -> None:
    """``CREATE TABLE IF NOT EXISTS`` for `table` (no indexes: the log's tables have none), its text
    compiled once per dialect and process: the same table as ``table.create(checkfirst=True)``
    without its reflection query and compilation at every start. Two runners racing to create it
    both end up using it (a DBAPI error is re-raised only when the table is still missing)."""
    assert not table.indexes, f"create_table does not create the indexes of {table.name}"
    key = (engine.dialect.name, table.name)
    ddl = _DDL.get(key)
    if ddl is None:
        ddl = _DDL[key] = str(sa.schema.CreateTable(table, if_not_exists=True).compile(dialect=engine.dialect))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(ddl)
    except sa.exc.DBAPIError:
        if not sa.inspect(engine).has_table(table.name):
            raise


class EntryExists(Exception):
    """An entry for (query id, batch id) is already in the table."""


_SQLITE_IO = ("disk I/O error", "database or disk is full", "unable to open database file",
              "attempt to write a readonly database")
#: below this many free bytes an SQLite I/O failure is taken for a full disk
FULL_BELOW = 256 << 10


def sqlite_failure(url: Any, e: BaseException) -> Exception | None:
    """An SQLite log's I/O failure (a full disk, an unreadable file) as a CheckpointAccessError
    naming the file, the free space of its filesystem and ENOSPC when the disk is full; None for
    any other error (raise that as it is)."""
    orig = getattr(e, "orig", None) or e
    u = sa.engine.make_url(url) if not isinstance(url, sa.engine.URL) else url
    if not isinstance(orig, sqlite3.OperationalError) or u.get_backend_name() != "sqlite" or not u.database:
        return None
    text = str(orig)
    if not any(k in text for k in _SQLITE_IO):
        return None
    path = os.path.abspath(u.database)
    where = os.path.dirname(path)
    try:
        st = os.statvfs(where)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    left = f"{free} bytes free on the filesystem of {where}" if free is not None else f"{where} cannot be examined"
    if "full" in text or (free is not None and free < FULL_BELOW):
        return CheckpointAccessError(
            errno.ENOSPC, f"the offsets/commits log {path} cannot be written: the disk is full (ENOSPC, {left}; "
                          f"SQLite: {text}). Free space on that disk, or move the log to another database with "
                          f"`increments migrate-log`; a batch that was not committed is redone when the query starts "
                          f"again.")
    return CheckpointAccessError(
        errno.EIO, f"the offsets/commits log {path} cannot be read or written ({text}; {left}). Check the disk and "
                   f"the file's permissions; a batch that was not committed is redone when the query starts again.")


class LogConnection:
    """One DBAPI connection for the statements of one batch log, in autocommit mode.

    Statements are written with `?` placeholders and turned into the driver's style once. Counts
    what it sends in `stats`: "statements" (each one round trip) and "commits" (statements that
    wrote: each its own transaction, one durable commit).

    A lost connection (a PostgreSQL restart, a network drop) is replaced once per statement: a read
    is simply sent again; a write whose outcome is unknown is first checked (`landed`, a read of
    the row the write would have made, which names this runner) and sent again only if it did not
    land, so a retried write can neither be applied twice nor be mistaken for another runner's.
    Thread safe (one lock); after a fork the child opens its own connection.
    """

    def __init__(self, engine: sa.Engine):
        self.engine = engine
        self.dialect = engine.dialect
        self.stats = {"statements": 0, "commits": 0}
        self._conn: Any = None
        self._pid = 0
        self._lock = threading.RLock()
        self._sql: dict[str, str] = {}
        style = self.dialect.paramstyle
        self._marker = "?" if style == "qmark" else "%s" if style in ("format", "pyformat") else None
        if self._marker is None:
            raise ValueError(f"the batch log does not support the {self.dialect.name} driver's paramstyle {style!r}")
        self._finalizer = weakref.finalize(self, LogConnection._close_conn, [None])

    def sql(self, text: str) -> str:
        s = self._sql.get(text)
        if s is None:
            s = self._sql[text] = text.replace("?", self._marker)
        return s

    def _connect(self) -> Any:
        raw = self.engine.raw_connection()      # through the pool: its connect events run (SQLite: WAL)
        raw.detach()                            # this log's own from now on (autocommit, never pooled)
        conn = raw.dbapi_connection
        conn.rollback()                         # a pool ping may have begun a transaction
        if self.dialect.name == "sqlite":
            conn.isolation_level = None
        else:
            conn.autocommit = True
        self._conn, self._pid = conn, os.getpid()
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, LogConnection._close_conn, [conn])
        return conn

    @staticmethod
    def _close_conn(box: list) -> None:
        conn = box[0]
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            self._close_conn([conn])

    def close(self) -> None:
        with self._lock:
            self._discard()
            self._finalizer.detach()

    def execute(self, text: str, params: tuple, *, fetch: bool = True, write: bool = False,
                landed: Callable[[], Any] | None = None) -> Any:
        """Run one statement: its first row (fetch) or its rowcount. DBAPI errors are raised as
        they are (IntegrityError: the driver's, see `integrity_error`)."""
        sql = self.sql(text)
        with self._lock:
            for attempt in (1, 2):
                try:
                    conn = self._conn if self._conn is not None and self._pid == os.getpid() else self._connect()
                except sa.exc.DBAPIError as e:
                    raise (sqlite_failure(self.engine.url, e) or e) from e
                cur = None
                try:
                    cur = conn.cursor()
                    cur.execute(sql, params)
                    self.stats["statements"] += 1
                    out = cur.fetchone() if fetch else cur.rowcount
                    if write and (fetch or out):
                        self.stats["commits"] += 1
                    return out
                except self.dialect.loaded_dbapi.Error as e:
                    if attempt == 2 or not self.dialect.is_disconnect(e, conn, cur):
                        failure = sqlite_failure(self.engine.url, e)
                        if failure is not None:
                            raise failure from e
                        raise
                    self._discard()
                    if write and landed is not None:
                        done = landed()          # on a new connection (recursion: a read)
                        if done is not None:
                            return done
                finally:
                    if cur is not None:
                        try:
                            cur.close()
                        except Exception:  # noqa: BLE001
                            pass

    @property
    def integrity_error(self) -> type[Exception]:
        return self.dialect.loaded_dbapi.IntegrityError


class MetadataLog:
    """A durable, append-only log of JSON entries, one per batch id, for one query."""

    table_name: str = "increments_log"
    entry_version: int = 1

    def __init__(self, engine: sa.Engine, query_id: str, conn: LogConnection | None = None):
        self.engine = engine
        self.query_id = query_id
        self.table = _table(self.table_name)
        self.conn = conn or LogConnection(engine)
        t = self.table_name
        cols = ", ".join(_COLUMNS)
        self._q_get = f"SELECT {cols} FROM {t} WHERE query_id = ? AND batch_id = ?"
        self._q_latest = f"SELECT {cols} FROM {t} WHERE query_id = ? ORDER BY batch_id DESC LIMIT 1"
        self._q_owner = f"SELECT owner, attempt FROM {t} WHERE query_id = ? AND batch_id = ?"
        self._q_insert = f"INSERT INTO {t} ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?)"
        self._q_claim = (f"UPDATE {t} SET owner = ?, attempt = ? WHERE query_id = ? AND batch_id = ? "
                         "AND attempt = ?")
        self._q_replace = (f"UPDATE {t} SET body = ?, owner = ?, attempt = 1 WHERE query_id = ? AND batch_id = ? "
                           "AND owner = ? AND attempt = ?")

    def create(self) -> None:
        """Create the table if missing; two runners racing to create it both end up using it."""
        create_table(self.engine, self.table)

    def _row(self, batch_id: int, body_text: str, owner: str) -> tuple:
        return (self.query_id, batch_id, self.entry_version, body_text, owner, 1, int(time.time() * 1000))

    # -- writes -------------------------------------------------------------------------
    def add(self, batch_id: int, body: dict[str, Any], owner: str) -> str:
        """Insert the entry for batch_id (one statement, one commit); raise EntryExists if any runner
        already wrote it. Returns the body as stored (JSON text)."""
        text = json.dumps(body, sort_keys=True)

        def landed() -> bool | None:
            got = self.owner(batch_id)
            return True if got is not None and got[0] == owner and got[1] == 1 else None
        try:
            self.conn.execute(self._q_insert, self._row(batch_id, text, owner), fetch=False, write=True,
                              landed=landed)
        except self.conn.integrity_error as e:
            raise EntryExists(f"{self.table_name}[{batch_id}] exists for query {self.query_id}") from e
        return text

    def claim(self, batch_id: int, owner: str, seen_attempt: int) -> int | None:
        """Compare-and-swap the owner of an entry; return the new attempt, or None if another runner claimed it first."""
        def landed() -> int | None:
            return 1 if self.owner(batch_id) == (owner, seen_attempt + 1) else None
        n = self.conn.execute(self._q_claim, (owner, seen_attempt + 1, self.query_id, batch_id, seen_attempt),
                              fetch=False, write=True, landed=landed)
        return seen_attempt + 1 if n == 1 else None

    def replace(self, batch_id: int, body: dict[str, Any], owner: str, seen_owner: str, seen_attempt: int) -> str | None:
        """Compare-and-swap a whole entry (body and owner) that (seen_owner, seen_attempt) still
        owns; the body as stored (JSON text), or None if another runner changed it first."""
        text = json.dumps(body, sort_keys=True)

        def landed() -> int | None:
            return 1 if self.owner(batch_id) == (owner, 1) else None
        n = self.conn.execute(self._q_replace, (text, owner, self.query_id, batch_id, seen_owner, seen_attempt),
                              fetch=False, write=True, landed=landed)
        return text if n == 1 else None

    # -- reads --------------------------------------------------------------------------
    def get(self, batch_id: int) -> dict[str, Any] | None:
        row = self.conn.execute(self._q_get, (self.query_id, batch_id))
        return self._decode(row) if row else None

    def owner(self, batch_id: int) -> tuple[str, int] | None:
        """(owner, attempt) of the entry for batch_id, or None (a light read for the fence)."""
        row = self.conn.execute(self._q_owner, (self.query_id, batch_id))
        return (row[0], int(row[1])) if row else None

    def latest(self) -> dict[str, Any] | None:
        row = self.conn.execute(self._q_latest, (self.query_id,))
        return self._decode(row) if row else None

    def entries(self, since: int | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        t = self.table
        q = sa.select(*[t.c[c] for c in _COLUMNS]).where(t.c.query_id == self.query_id)
        if since is not None:
            q = q.where(t.c.batch_id >= since)
        q = q.order_by(t.c.batch_id.desc())
        if limit:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return [self._decode(tuple(r)) for r in reversed(rows)]

    def _decode(self, row: tuple) -> dict[str, Any]:
        _, batch_id, entry_version, body_text, owner, attempt, created_at = row
        if entry_version > self.entry_version:
            raise RuntimeError(
                f"{self.table_name}[{batch_id}] of query {self.query_id} was written by a newer increments "
                f"(entry version {entry_version} > {self.entry_version}); upgrade increments to read it")
        body = json.loads(body_text)
        body["batch_id"] = int(batch_id)
        body["_owner"] = owner
        body["_attempt"] = int(attempt)
        body["_created_at"] = int(created_at)
        return body


class OffsetLog(MetadataLog):
    """offsets[N]: written before batch N reads anything (write-ahead)."""
    table_name = "increments_offsets"


class CommitLog(MetadataLog):
    """commits[N]: written after batch N's output is durable in the sink."""
    table_name = "increments_commits"

    def add_if_owner(self, batch_id: int, body: dict[str, Any], owner: str, offsets: OffsetLog) -> str:
        """Insert commits[N] only while `owner` still owns offsets[N]: one statement (INSERT ...
        SELECT ... WHERE EXISTS the owned offsets row), one round trip, one commit. Returns the body
        as stored (JSON text).

        Raises EntryExists when commits[N] is already there, PermissionError when another runner
        claimed offsets[N] since this one planned it.
        """
        text = json.dumps(body, sort_keys=True)
        row = self._row(batch_id, text, owner)
        sql = (f"INSERT INTO {self.table_name} ({', '.join(_COLUMNS)}) "
               "SELECT CAST(? AS VARCHAR(64)), CAST(? AS BIGINT), CAST(? AS INTEGER), CAST(? AS TEXT), "
               "CAST(? AS VARCHAR(64)), CAST(? AS INTEGER), CAST(? AS BIGINT) "
               f"WHERE EXISTS (SELECT 1 FROM {offsets.table_name} WHERE query_id = ? AND batch_id = ? AND owner = ?)")

        def landed() -> int | None:
            got = self.owner(batch_id)
            return 1 if got is not None and got[0] == owner else None
        try:
            n = self.conn.execute(sql, row + (self.query_id, batch_id, owner), fetch=False, write=True, landed=landed)
        except self.conn.integrity_error as e:
            raise EntryExists(f"commits[{batch_id}] exists for query {self.query_id}") from e
        if n != 1:
            raise PermissionError(f"offsets[{batch_id}] of query {self.query_id} is owned by another runner")
        return text

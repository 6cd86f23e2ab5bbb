"""MetadataLog: one SQL table of versioned JSON entries keyed by (query id, batch id).

The same schema and code path serve the embedded SQLite default and PostgreSQL. The primary key
(query_id, batch_id) is the fence between two runners of one query: only one insert of an entry
for a batch can succeed. Each entry carries a format version (`entry_version`), as Spark puts a
version line atop each log file, so a later release can read (or refuse) older entries.

Columns: query_id, batch_id, entry_version, body (JSON text), owner (the run id that wrote or
claimed the entry), attempt (how many runs have claimed it), created_at (ms since epoch).
"""
from __future__ import annotations

import json
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

_METADATA = sa.MetaData()


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


class EntryExists(Exception):
    """An entry for (query id, batch id) is already in the table."""


class MetadataLog:
    """A durable, append-only log of JSON entries, one per batch id, for one query."""

    table_name: str = "increments_log"
    entry_version: int = 1

    def __init__(self, engine: sa.Engine, query_id: str):
        self.engine = engine
        self.query_id = query_id
        self.table = _table(self.table_name)

    def create(self) -> None:
        """Create the table if missing; two runners racing to create it both end up using it."""
        try:
            self.table.create(self.engine, checkfirst=True)
        except sa.exc.DBAPIError:
            if not sa.inspect(self.engine).has_table(self.table_name):
                raise

    # -- writes -------------------------------------------------------------------------
    def add(self, batch_id: int, body: dict[str, Any], owner: str) -> None:
        """Insert the entry for batch_id; raise EntryExists if any runner already wrote it."""
        row = dict(query_id=self.query_id, batch_id=batch_id, entry_version=self.entry_version,
                   body=json.dumps(body, sort_keys=True), owner=owner, attempt=1,
                   created_at=int(time.time() * 1000))
        try:
            with self.engine.begin() as conn:
                conn.execute(self.table.insert().values(**row))
        except IntegrityError as e:
            raise EntryExists(f"{self.table_name}[{batch_id}] exists for query {self.query_id}") from e

    def claim(self, batch_id: int, owner: str, seen_attempt: int) -> int | None:
        """Compare-and-swap the owner of an entry; return the new attempt, or None if another runner claimed it first."""
        t = self.table
        with self.engine.begin() as conn:
            res = conn.execute(
                t.update()
                .where(t.c.query_id == self.query_id, t.c.batch_id == batch_id, t.c.attempt == seen_attempt)
                .values(owner=owner, attempt=seen_attempt + 1))
        return seen_attempt + 1 if res.rowcount == 1 else None

    # -- reads --------------------------------------------------------------------------
    def get(self, batch_id: int) -> dict[str, Any] | None:
        t = self.table
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t).where(t.c.query_id == self.query_id, t.c.batch_id == batch_id)).first()
        return self._decode(row) if row else None

    def owner(self, batch_id: int) -> tuple[str, int] | None:
        """(owner, attempt) of the entry for batch_id, or None (a light read for the fence)."""
        t = self.table
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.c.owner, t.c.attempt)
                               .where(t.c.query_id == self.query_id, t.c.batch_id == batch_id)).first()
        return (row.owner, row.attempt) if row else None

    def latest(self) -> dict[str, Any] | None:
        t = self.table
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t).where(t.c.query_id == self.query_id)
                               .order_by(t.c.batch_id.desc()).limit(1)).first()
        return self._decode(row) if row else None

    def entries(self, since: int | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        t = self.table
        q = sa.select(t).where(t.c.query_id == self.query_id)
        if since is not None:
            q = q.where(t.c.batch_id >= since)
        q = q.order_by(t.c.batch_id.desc())
        if limit:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return [self._decode(r) for r in reversed(rows)]

    def _decode(self, row) -> dict[str, Any]:
        if row.entry_version > self.entry_version:
            raise RuntimeError(
                f"{self.table_name}[{row.batch_id}] of query {self.query_id} was written by a newer increments "
                f"(entry version {row.entry_version} > {self.entry_version}); upgrade increments to read it")
        body = json.loads(row.body)
        body["batch_id"] = row.batch_id
        body["_owner"] = row.owner
        body["_attempt"] = row.attempt
        body["_created_at"] = row.created_at
        return body


class OffsetLog(MetadataLog):
    """offsets[N]: written before batch N reads anything (write-ahead)."""
    table_name = "increments_offsets"


class CommitLog(MetadataLog):
    """commits[N]: written after batch N's output is durable in the sink."""
    table_name = "increments_commits"

    def add_if_owner(self, batch_id: int, body: dict[str, Any], owner: str, offsets: OffsetLog) -> None:
        """Insert commits[N] only while `owner` still owns offsets[N] (one atomic statement).

        Raises EntryExists when commits[N] is already there, PermissionError when another runner
        claimed offsets[N] since this one planned it.
        """
        o = offsets.table
        row = dict(query_id=self.query_id, batch_id=batch_id, entry_version=self.entry_version,
                   body=json.dumps(body, sort_keys=True), owner=owner, attempt=1,
                   created_at=int(time.time() * 1000))
        owned = sa.select(*[sa.literal(v, type_=c.type).label(k) for k, v, c in
                            ((k, row[k], self.table.c[k]) for k in row)]) \
            .where(sa.exists().where(o.c.query_id == self.query_id, o.c.batch_id == batch_id, o.c.owner == owner))
        try:
            with self.engine.begin() as conn:
                inserted = conn.execute(self.table.insert().from_select(list(row), owned)
                                        .returning(self.table.c.batch_id)).first()
        except IntegrityError as e:
            raise EntryExists(f"commits[{batch_id}] exists for query {self.query_id}") from e
        if inserted is None:
            raise PermissionError(f"offsets[{batch_id}] of query {self.query_id} is owned by another runner")

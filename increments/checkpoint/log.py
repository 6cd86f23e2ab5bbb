"""The batch log of one query: offsets[N] (write-ahead) and commits[N], in SQL.

Recovery rule (the protocol's contract): if offsets[N] exists and commits[N] does not, batch N
is redone with exactly offsets[N]'s start and end offsets, watermarks and timestamp. Nothing is
ever deleted from the log by the engine.

URL: `log_url` option, else env INCREMENTS_LOG_URL, else an SQLite file `<checkpoint>/log.sqlite`.
The SQLite default exists only for a checkpoint on the local disk: a checkpoint on an object store
(s3://, gs://, az://, ...) needs a log that every machine reaches and that fences runners with
transactions, so it is refused with the embedded SQLite log (no log_url, or an sqlite URL).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlalchemy as sa

from ..errors import ConcurrentRunError
from .sql_log import CommitLog, EntryExists, OffsetLog

_ENGINES: dict[str, sa.Engine] = {}


def resolve_log_url(log_url: str | None, checkpoint: Any) -> str:
    """The log's SQLAlchemy URL for a checkpoint (a Location or a path); see the module doc.

    Raises AnalysisException for a remote checkpoint without a PostgreSQL log."""
    from ..storage import location
    loc = location(checkpoint)
    url = log_url or os.environ.get("INCREMENTS_LOG_URL")
    if not loc.is_local and (not url or url.lower().startswith("sqlite")):
        from ..errors import AnalysisException
        got = "an sqlite log URL" if url else "no log_url option and no INCREMENTS_LOG_URL"
        raise AnalysisException(
            f"the checkpoint {loc.url} is on an object store, and {got} was given: the offsets/commits log "
            "must then be PostgreSQL (the embedded SQLite log lives on one machine's disk). Set the "
            "write_stream option log_url (or INCREMENTS_LOG_URL) to a postgresql:// URL.")
    if url:
        return url
    return "sqlite:///" + os.path.join(loc.local_path(), "log.sqlite")


SQLITE_BUSY_TIMEOUT_S = 30.0


def engine_for(url: str) -> sa.Engine:
    """One engine per URL and process; SQLite gets WAL and a busy timeout for concurrent runners."""
    eng = _ENGINES.get(url)
    if eng is None:
        if url.startswith("sqlite"):
            eng = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False})

            @sa.event.listens_for(eng, "connect")
            def _wal(dbapi_conn, _rec):  # noqa: ANN001
                cur = dbapi_conn.cursor()
                _wal_mode(cur)
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.close()
        else:
            eng = sa.create_engine(url, pool_pre_ping=True)
        _ENGINES[url] = eng
    return eng


def _wal_mode(cur: Any, timeout_s: float = SQLITE_BUSY_TIMEOUT_S) -> None:
    """Put the SQLite log in WAL mode (a property of the file: the first connection sets it).
    Switching takes an exclusive lock and SQLite answers "database is locked" at once, without its
    busy timeout, when another process (a second runner starting at the same moment) holds one:
    retry for as long as the busy timeout would have waited."""
    import sqlite3
    import time
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cur.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@dataclass
class OffsetsEntry:
    """offsets[N]: what batch N reads and the watermarks it runs with."""
    batch_id: int
    start: dict[str, Any]               # per source index: start offset (exclusive)
    end: dict[str, Any]                 # per source index: end offset (inclusive)
    watermark_ms: int                   # W_N: eviction and emission
    late_watermark_ms: int              # W_{N-1}: the late-row filter
    input_watermarks_ms: dict[str, int]  # per watermark node, before this batch
    timestamp_ms: int                   # the batch's processing time
    conf: dict[str, Any] = field(default_factory=dict)
    owner: str = ""
    attempt: int = 1

    def body(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("batch_id", "owner", "attempt"):
            d.pop(k)
        return d

    @classmethod
    def from_body(cls, b: dict[str, Any]) -> "OffsetsEntry":
        return cls(batch_id=b["batch_id"], start=b["start"], end=b["end"], watermark_ms=b["watermark_ms"],
                   late_watermark_ms=b["late_watermark_ms"], input_watermarks_ms=b["input_watermarks_ms"],
                   timestamp_ms=b["timestamp_ms"], conf=b.get("conf", {}), owner=b["_owner"],
                   attempt=b["_attempt"])


@dataclass
class CommitEntry:
    """commits[N]: batch N is done; what the next batch starts from and what N did (lineage)."""
    batch_id: int
    next_watermark_ms: int
    next_input_watermarks_ms: dict[str, int]
    num_input_rows: int = 0
    num_output_rows: int = 0
    state_versions: dict[str, int] = field(default_factory=dict)
    sink_version: Any = None
    durations_ms: dict[str, int] = field(default_factory=dict)
    event_time: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    committed_at_ms: int = 0

    def body(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("batch_id")
        return d

    @classmethod
    def from_body(cls, b: dict[str, Any]) -> "CommitEntry":
        known = {k: b[k] for k in cls.__dataclass_fields__ if k in b}
        known.setdefault("committed_at_ms", b.get("_created_at", 0))
        return cls(**known)


class BatchLog:
    """offsets and commits of one query, with the fence between runners."""

    def __init__(self, url: str, query_id: str, query_name: str = ""):
        self.url = url
        self.query_id = query_id
        self.query_name = query_name or query_id
        self.engine = engine_for(url)
        self.offsets = OffsetLog(self.engine, query_id)
        self.commits = CommitLog(self.engine, query_id)
        self.offsets.create()
        self.commits.create()

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    def latest_offsets(self) -> OffsetsEntry | None:
        b = self.offsets.latest()
        return OffsetsEntry.from_body(b) if b else None

    def latest_commit(self) -> CommitEntry | None:
        b = self.commits.latest()
        return CommitEntry.from_body(b) if b else None

    def get_offsets(self, batch_id: int) -> OffsetsEntry | None:
        b = self.offsets.get(batch_id)
        return OffsetsEntry.from_body(b) if b else None

    def get_commit(self, batch_id: int) -> CommitEntry | None:
        b = self.commits.get(batch_id)
        return CommitEntry.from_body(b) if b else None

    def write_offsets(self, entry: OffsetsEntry, owner: str) -> None:
        """Write-ahead offsets[N]; if another runner wrote it first, this runner must stop."""
        try:
            self.offsets.add(entry.batch_id, entry.body(), owner)
        except EntryExists as e:
            other = self.offsets.get(entry.batch_id) or {}
            raise ConcurrentRunError(
                f"query {self.query_name!r} (id {self.query_id}): offsets[{entry.batch_id}] was written by another "
                f"runner (run {other.get('_owner')}) while this runner (run {owner}) planned it. Two runners of one "
                f"query must not run at once; this one stops. Start only one runner per checkpoint.") from e
        entry.owner, entry.attempt = owner, 1

    def claim_redo(self, entry: OffsetsEntry, owner: str) -> OffsetsEntry:
        """Take ownership of an uncommitted offsets[N] to redo it (crash recovery)."""
        attempt = self.offsets.claim(entry.batch_id, owner, entry.attempt)
        if attempt is None:
            raise ConcurrentRunError(
                f"query {self.query_name!r} (id {self.query_id}): another runner claimed the redo of batch "
                f"{entry.batch_id} at the same time as run {owner}; this one stops. Start only one runner per checkpoint.")
        entry.owner, entry.attempt = owner, attempt
        return entry

    def write_commit(self, entry: CommitEntry, owner: str) -> None:
        """commits[N], only while this runner owns offsets[N]; exactly one runner can commit a batch."""
        try:
            self.commits.add_if_owner(entry.batch_id, entry.body(), owner, self.offsets)
        except EntryExists as e:
            raise ConcurrentRunError(
                f"query {self.query_name!r} (id {self.query_id}): batch {entry.batch_id} was already committed by "
                f"another runner; run {owner} stops without committing it again.") from e
        except PermissionError as e:
            cur = self.offsets.get(entry.batch_id) or {}
            raise ConcurrentRunError(
                f"query {self.query_name!r} (id {self.query_id}): batch {entry.batch_id} was taken over by run "
                f"{cur.get('_owner')} (attempt {cur.get('_attempt')}); run {owner} stops without committing it. "
                f"Start only one runner per checkpoint.") from e

    def history(self, limit: int = 50) -> list[tuple[OffsetsEntry, CommitEntry | None]]:
        offs = [OffsetsEntry.from_body(b) for b in self.offsets.entries(limit=limit)]
        if not offs:
            return []
        commits = {b["batch_id"]: CommitEntry.from_body(b) for b in self.commits.entries(since=offs[0].batch_id)}
        return [(o, commits.get(o.batch_id)) for o in offs]


def open_log(log_url: str | None, checkpoint: Any, query_id: str, query_name: str = "") -> BatchLog:
    return BatchLog(resolve_log_url(log_url, checkpoint), query_id, query_name)

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

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field, fields
from typing import Any

import sqlalchemy as sa

from ..errors import AnalysisException, ConcurrentRunError
from ..pg_driver import psycopg_url
from ..storage import location
from .sql_log import CommitLog, EntryExists, LogConnection, OffsetLog

_ENGINES: dict[str, sa.Engine] = {}


def resolve_log_url(log_url: str | None, checkpoint: Any) -> str:
    """The log's SQLAlchemy URL for a checkpoint (a Location or a path); see the module doc.

    Raises AnalysisException for a remote checkpoint without a PostgreSQL log."""
    loc = location(checkpoint)
    url = log_url or os.environ.get("INCREMENTS_LOG_URL")
    if not loc.is_local and (not url or url.lower().startswith("sqlite")):
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
                # FULL: every commit fsyncs the WAL. offsets[N] must survive a power loss or an OS
                # crash, not only a killed process (what NORMAL guarantees in WAL mode): a lost
                # offsets[N] after the sink took batch N would re-plan N with other offsets, and the
                # sink would skip them as a replay. Measured cost: ~0.2 ms per commit, 2 per batch.
                cur.execute("PRAGMA synchronous=FULL")
                cur.close()
        else:
            eng = sa.create_engine(psycopg_url(url), pool_pre_ping=True)   # postgresql:// is psycopg 3's
        _ENGINES[url] = eng
    return eng


def _wal_mode(cur: Any, timeout_s: float = SQLITE_BUSY_TIMEOUT_S) -> None:
    """Put the SQLite log in WAL mode (a property of the file: the first connection sets it).
    Switching takes an exclusive lock and SQLite answers "database is locked" at once, without its
    busy timeout, when another process (a second runner starting at the same moment) holds one:
    retry for as long as the busy timeout would have waited."""
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


#: OffsetsEntry.conf key of a fence entry (checkpoint/repartition.py; execution/steps.py plans over it)
BARRIER_KEY = "ownership_barrier"


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
        """The fields stored as JSON (a shallow dict: serialize it, do not mutate its values)."""
        return {f: getattr(self, f) for f in _OFFSETS_BODY}

    @property
    def barrier(self) -> dict[str, Any] | None:
        """A fence entry, not a batch: what `increments repartition` wrote as offsets[N] to take the
        query's ownership ({"by", "from", "to", "at_ms"}); None for a batch's offsets."""
        return self.conf.get(BARRIER_KEY)

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
        """The fields stored as JSON (a shallow dict: serialize it, do not mutate its values)."""
        return {f: getattr(self, f) for f in _COMMIT_BODY}

    @classmethod
    def from_body(cls, b: dict[str, Any]) -> "CommitEntry":
        known = {k: b[k] for k in cls.__dataclass_fields__ if k in b}
        known.setdefault("committed_at_ms", b.get("_created_at", 0))
        return cls(**known)


_OFFSETS_BODY = [f.name for f in fields(OffsetsEntry) if f.name not in ("batch_id", "owner", "attempt")]
_COMMIT_BODY = [f.name for f in fields(CommitEntry) if f.name != "batch_id"]


class BatchLog:
    """offsets and commits of one query, with the fence between runners.

    One DBAPI connection serves both tables (sql_log.LogConnection; `stats` counts its statements
    and commits). `close()` releases it (the runtime's close does).

    What this log last committed itself: after `write_commit` of a batch this log planned
    (`write_offsets`) or claimed (`claim_redo`), it keeps that offsets entry and that commit entry
    exactly as stored, and `latest_known` returns them instead of reading the log: the next plan
    of the runner that owns the query costs no read. This is safe because the fence does not depend
    on it: had another runner written offsets[N+1] meanwhile, this runner's write-ahead insert of
    offsets[N+1] fails on the primary key and it stops (ConcurrentRunError), as when two runners
    race for a batch. Any failed write forgets it.
    """

    def __init__(self, url: str, query_id: str, query_name: str = ""):
        self.url = url
        self.query_id = query_id
        self.query_name = query_name or query_id
        self.engine = engine_for(url)
        self.conn = LogConnection(self.engine)
        self.offsets = OffsetLog(self.engine, query_id, self.conn)
        self.commits = CommitLog(self.engine, query_id, self.conn)
        self.offsets.create()
        self.commits.create()
        self._planned: tuple[int, str, str, int] | None = None      # (batch, offsets body JSON, owner, attempt)
        self._mine: tuple[tuple[int, str, str, int], int, str, int] | None = None  # (planned, batch, commit JSON, ms)

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    @property
    def stats(self) -> dict[str, int]:
        """{"statements": round trips sent, "commits": durable commits} of this log's connection."""
        return self.conn.stats

    def close(self) -> None:
        self._planned = self._mine = None
        self.conn.close()

    def latest_known(self) -> tuple[OffsetsEntry | None, CommitEntry | None, bool]:
        """(latest offsets, latest commit, from memory): what this log itself last committed when
        it did (see the class doc), else both read from the log."""
        mine = self._mine
        if mine is None:
            return self.latest_offsets(), self.latest_commit(), False
        (batch_id, off_text, owner, attempt), _, commit_text, created = mine
        ob = json.loads(off_text)
        ob.update(batch_id=batch_id, _owner=owner, _attempt=attempt)
        cb = json.loads(commit_text)
        cb.update(batch_id=batch_id, _created_at=created)
        return OffsetsEntry.from_body(ob), CommitEntry.from_body(cb), True

    def forget(self) -> None:
        """Drop what this log remembers of its own last commit (the next plan reads the log)."""
        self._planned = self._mine = None

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
        self._planned = self._mine = None
        try:
            text = self.offsets.add(entry.batch_id, entry.body(), owner)
        except EntryExists as e:
            other = self.offsets.get(entry.batch_id) or {}
            barrier = (other.get("conf") or {}).get(BARRIER_KEY)
            if barrier:
                raise ConcurrentRunError(barrier_message(self.query_name, self.query_id, entry.batch_id, barrier,
                                                         owner)) from e
            raise ConcurrentRunError(
                f"query {self.query_name!r} (id {self.query_id}): offsets[{entry.batch_id}] was written by another "
                f"runner (run {other.get('_owner')}) while this runner (run {owner}) planned it. Two runners of one "
                f"query must not run at once; this one stops. Start only one runner per checkpoint.") from e
        entry.owner, entry.attempt = owner, 1
        self._planned = (entry.batch_id, text, owner, 1)

    def take_over(self, barrier: OffsetsEntry, entry: OffsetsEntry, owner: str) -> None:
        """Plan batch N over the fence entry offsets[N] (`barrier`): one compare-and-swap of the
        row; ConcurrentRunError when another runner took it first."""
        self._planned = self._mine = None
        text = self.offsets.replace(entry.batch_id, entry.body(), owner, barrier.owner, barrier.attempt)
        if text is None:
            raise ConcurrentRunError(
                f"query {self.query_name!r} (id {self.query_id}): another runner planned batch {entry.batch_id} at "
                f"the same time as run {owner}; this one stops. Start only one runner per checkpoint.")
        entry.owner, entry.attempt = owner, 1
        self._planned = (entry.batch_id, text, owner, 1)

    def claim_redo(self, entry: OffsetsEntry, owner: str) -> OffsetsEntry:
        """Take ownership of an uncommitted offsets[N] to redo it (crash recovery)."""
        self._planned = self._mine = None
        attempt = self.offsets.claim(entry.batch_id, owner, entry.attempt)
        if attempt is None:
            raise ConcurrentRunError(
                f"query {self.query_name!r} (id {self.query_id}): another runner claimed the redo of batch "
                f"{entry.batch_id} at the same time as run {owner}; this one stops. Start only one runner per checkpoint.")
        entry.owner, entry.attempt = owner, attempt
        self._planned = (entry.batch_id, json.dumps(entry.body(), sort_keys=True), owner, attempt)
        return entry

    def write_commit(self, entry: CommitEntry, owner: str) -> None:
        """commits[N], only while this runner owns offsets[N]; exactly one runner can commit a batch."""
        planned, self._planned, self._mine = self._planned, None, None
        try:
            text = self.commits.add_if_owner(entry.batch_id, entry.body(), owner, self.offsets)
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
        if planned is not None and planned[0] == entry.batch_id and planned[2] == owner:
            self._mine = (planned, entry.batch_id, text, int(entry.committed_at_ms))

    def history(self, limit: int = 50) -> list[tuple[OffsetsEntry, CommitEntry | None]]:
        offs = [OffsetsEntry.from_body(b) for b in self.offsets.entries(limit=limit)]
        if not offs:
            return []
        commits = {b["batch_id"]: CommitEntry.from_body(b) for b in self.commits.entries(since=offs[0].batch_id)}
        return [(o, commits.get(o.batch_id)) for o in offs]


def barrier_message(name: str, query_id: str, batch_id: int, barrier: dict[str, Any], run: str) -> str:
    return (f"query {name!r} (id {query_id}): {barrier.get('by', 'another command')} took over the query's checkpoint "
            f"at batch {batch_id} (state partitions {barrier.get('from')} -> {barrier.get('to')}); this runner "
            f"(run {run}) lost the query's ownership and stops without touching state or the sink. Start the query "
            f"again with .option(\"state_partitions\", {barrier.get('to')}).")


def open_log(log_url: str | None, checkpoint: Any, query_id: str, query_name: str = "") -> BatchLog:
    return BatchLog(resolve_log_url(log_url, checkpoint), query_id, query_name)

"""AvailableNow drains of a query, in the same SQL database as its offsets/commits log.

A drain fixes, once, each source's AvailableNow target (the offsets that were latest when the drain
began); batch runs then plan with those targets restored until a plan finds nothing left, which
marks the drain done. Table `increments_drains`: (query_id, drain_id) primary key, targets (JSON:
source index -> target), state (`active` | `done` | `cancelled`), created_at / finished_at (ms),
batches (how many batches the drain ran), last_batch_id.

Contract: at most one active drain per query: `start` returns the active drain if there is one
(starting a drain while one runs does not move its target). The engine never reads this table;
the Dagster orchestration does.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

_METADATA = sa.MetaData()
DRAINS = sa.Table(
    "increments_drains", _METADATA,
    sa.Column("query_id", sa.String(64), primary_key=True),
    sa.Column("drain_id", sa.String(64), primary_key=True),
    sa.Column("targets", sa.Text, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("finished_at", sa.BigInteger, nullable=True),
    sa.Column("batches", sa.Integer, nullable=False, default=0),
    sa.Column("last_batch_id", sa.BigInteger, nullable=True),
)


@dataclass
class Drain:
    query_id: str
    drain_id: str
    targets: dict[str, Any]
    state: str
    created_at: int
    finished_at: int | None = None
    batches: int = 0
    last_batch_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.state == "active"


class DrainLog:
    """The drains of one query (one SQLAlchemy engine, shared with the batch log)."""

    def __init__(self, engine: sa.Engine, query_id: str):
        self.engine = engine
        self.query_id = query_id
        DRAINS.create(engine, checkfirst=True)

    @classmethod
    def for_runtime(cls, rt: Any) -> "DrainLog":
        return cls(rt.log.engine, rt.query_id)

    def _row(self, r: Any) -> Drain:
        return Drain(r.query_id, r.drain_id, json.loads(r.targets), r.state, r.created_at, r.finished_at,
                     r.batches or 0, r.last_batch_id)

    def active(self) -> Drain | None:
        t = DRAINS
        with self.engine.connect() as c:
            r = c.execute(sa.select(t).where(t.c.query_id == self.query_id, t.c.state == "active")
                          .order_by(t.c.created_at.desc()).limit(1)).first()
        return self._row(r) if r else None

    def get(self, drain_id: str) -> Drain | None:
        t = DRAINS
        with self.engine.connect() as c:
            r = c.execute(sa.select(t).where(t.c.query_id == self.query_id, t.c.drain_id == drain_id)).first()
        return self._row(r) if r else None

    def recent(self, limit: int = 20) -> list[Drain]:
        t = DRAINS
        with self.engine.connect() as c:
            rows = c.execute(sa.select(t).where(t.c.query_id == self.query_id)
                             .order_by(t.c.created_at.desc()).limit(limit)).all()
        return [self._row(r) for r in rows]

    def start(self, targets: dict[str, Any], drain_id: str | None = None) -> tuple[Drain, bool]:
        """Record a new active drain with these targets; (drain, created). An active drain wins."""
        cur = self.active()
        if cur is not None:
            return cur, False
        d = Drain(self.query_id, drain_id or uuid.uuid4().hex[:12], targets, "active", int(time.time() * 1000))
        with self.engine.begin() as c:
            c.execute(DRAINS.insert().values(query_id=d.query_id, drain_id=d.drain_id,
                                             targets=json.dumps(targets, sort_keys=True), state="active",
                                             created_at=d.created_at, batches=0))
        return d, True

    def record_batch(self, drain_id: str, batch_id: int) -> None:
        t = DRAINS
        with self.engine.begin() as c:
            c.execute(t.update().where(t.c.query_id == self.query_id, t.c.drain_id == drain_id,
                                       sa.or_(t.c.last_batch_id.is_(None), t.c.last_batch_id < batch_id))
                      .values(batches=t.c.batches + 1, last_batch_id=batch_id))

    def finish(self, drain_id: str, state: str = "done") -> None:
        t = DRAINS
        with self.engine.begin() as c:
            c.execute(t.update().where(t.c.query_id == self.query_id, t.c.drain_id == drain_id,
                                       t.c.state == "active")
                      .values(state=state, finished_at=int(time.time() * 1000)))

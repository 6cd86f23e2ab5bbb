"""SCD type 2 of apply_changes (the rules are operators/apply_changes.py's module doc).

State, per key, in the operator's primary stores: every applied event, keyed (key..., sequence...)
so a prefix scan returns a key's events in sequence order; value (kind "U" | "D", content hash,
created_ms, the target's non-key column values...). A key touched by the batch:

    events = stored events, each new event added unless an event of the same sequence orders
             after it (delete over upsert, then the greater hash; identical duplicates are no-ops)
    history(events): walk in sequence order, one open version at a time:
        upsert, nothing open           -> open a version at its sequence with its values
        upsert, same tracked values    -> the open version takes its values (run continues)
        upsert, other tracked values   -> close the open version at its sequence, open a new one
        delete, a version open         -> close it at the delete's sequence
        delete, nothing open           -> an orphan delete (a tombstone, indexed for expiry)
    output = the difference between history(old events) and history(new events): a version whose
             start vanished -> "delete" (keys, __start_at); a new or changed version -> "upsert"

History is a function of the set of events, so the table does not depend on arrival order or on
how events are split over batches (while their tombstones have not expired).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from state.encoding import decode_key, decode_value, encode_key, encode_prefix, encode_value

from .base import BatchContext


@dataclass
class Event:
    seq: tuple
    kind: str                     # "U" | "D"
    h: str
    created: int
    values: tuple | None          # target column values (None for a delete)

    def order(self) -> tuple:
        return self.kind == "D", self.h


@dataclass
class Version:
    start: tuple
    end: tuple | None
    values: tuple


def history(events: list[Event], tracked: list[int]) -> tuple[dict[tuple, Version], dict[tuple, Event]]:
    """(versions by start, orphan deletes by sequence) of events sorted by sequence (module doc)."""
    versions: dict[tuple, Version] = {}
    orphans: dict[tuple, Event] = {}
    cur: Version | None = None
    for e in events:
        if e.kind == "D":
            if cur is None:
                orphans[e.seq] = e
            else:
                cur.end, cur = e.seq, None
            continue
        assert e.values is not None
        if cur is not None and all(cur.values[i] == e.values[i] for i in tracked):
            cur.values = e.values
            continue
        if cur is not None:
            cur.end = e.seq
        cur = versions[e.seq] = Version(e.seq, None, e.values)
    return versions, orphans


def _stored(op: Any, kb: bytes, vb: bytes) -> Event:
    dk = decode_key(kb)
    kind, h, created, *rest = decode_value(vb)
    if kind == "D":
        return Event(tuple(dk[len(op.keys):]), kind, h, created, None)
    given = dict(zip(op.keys, dk))
    it = iter(rest)
    values = tuple(given[c] if c in given else next(it) for c in op.target)
    return Event(tuple(dk[len(op.keys):]), kind, h, created, values)


def _encode(op: Any, e: Event) -> bytes:
    rest = (None,) * (len(op.target) - len(op.keys)) if e.values is None else \
        tuple(v for c, v in zip(op.target, e.values) if c not in op.keys)
    return encode_value((e.kind, e.h, e.created) + rest)


def apply_scd2(op: Any, ctx: BatchContext, store: Any, tombs: Any, part: pa.Table, metrics: dict) -> pa.Table:
    """Apply one partition's events (one per key and sequence); return its actions."""
    if not part.num_rows:
        return op.schema.empty_table()
    keys = list(zip(*[part.column(k).to_pylist() for k in op.keys]))
    seqs = list(zip(*[part.column(c).to_pylist() for c in op.seq]))
    values = list(zip(*[part.column(c).to_pylist() for c in op.target]))
    dels, hashes = part.column("__del").to_pylist(), part.column("__h").to_pylist()
    by_key: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        by_key.setdefault(k, []).append(i)
    rows: list[tuple[tuple, Version | None, tuple | None]] = []     # (key, version to upsert, start to delete)
    for key, idx in by_key.items():
        old = [_stored(op, kb, vb) for kb, vb in store.prefix_scan(encode_prefix(key))]
        events = {e.seq: e for e in old}
        changed = False
        for i in idx:
            new = Event(seqs[i], "D" if dels[i] else "U", hashes[i], ctx.timestamp_ms, None if dels[i] else values[i])
            cur = events.get(new.seq)
            if cur is not None and new.order() <= cur.order():
                metrics["num_ignored_changes"] += 1
                continue
            events[new.seq] = new
            store.put(encode_key(key + new.seq), _encode(op, new))
            changed = True
        if not changed:
            continue
        before, orphans_before = history(old, op.tracked)     # old: in sequence order (prefix scan)
        after, orphans_after = history(sorted(events.values(), key=lambda e: e.seq), op.tracked)
        for s, e in orphans_before.items():
            if not _same(orphans_after.get(s), e):
                tombs.delete(encode_key((e.created,) + key + s))
        for s, e in orphans_after.items():
            if not _same(orphans_before.get(s), e):
                tombs.put(encode_key((e.created,) + key + s), b"")
        rows += [(key, None, s) for s in before if s not in after]
        rows += [(key, v, None) for s, v in after.items() if before.get(s) != v]
    metrics["num_target_rows_upserted"] += sum(1 for _, v, _ in rows if v is not None)
    metrics["num_target_rows_deleted"] += sum(1 for _, v, _ in rows if v is None)
    return _actions(op, rows)


def _same(a: Event | None, b: Event) -> bool:
    return a is not None and (a.seq, a.kind, a.h, a.created) == (b.seq, b.kind, b.h, b.created)


def _seq_value(op: Any, seq: tuple | None) -> Any:
    if seq is None:
        return None
    return seq[0] if len(op.seq) == 1 else dict(zip(op.seq, seq))


def _actions(op: Any, rows: list[tuple[tuple, Version | None, tuple | None]]) -> pa.Table:
    """The action rows in op.schema's order: target columns, __start_at, __end_at, __action."""
    key_pos = [op.target.index(k) for k in op.keys]
    cols: list[list[Any]] = [[] for _ in op.target] + [[], [], []]
    for key, v, start in rows:
        if v is not None:
            vals, s, e, action = v.values, v.start, v.end, "upsert"
        else:
            vals = [None] * len(op.target)
            for p, kv in zip(key_pos, key):
                vals[p] = kv
            s, e, action = start, None, "delete"
        for c, x in zip(cols, vals):
            c.append(x)
        cols[-3].append(_seq_value(op, s))
        cols[-2].append(_seq_value(op, e))
        cols[-1].append(action)
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, op.schema)], schema=op.schema)


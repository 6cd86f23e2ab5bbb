"""State layout of the stream-stream join (one store per partition, partition = hash of the key).

Keys (state.encoding, order-preserving):
    ("L"|"R", key_text, batch_id, row)  -> (row values tuple, matched, event time µs | None)
    ("l"|"r", event time µs, batch_id, row) -> (key_text,)     time index, only for a side that
                                                              has a state watermark
    ("#",) -> (left rows, right rows)                         row counts of the partition
`key_text` is the equality key's text (the same for both sides), so a prefix scan of
("L", key_text) returns every stored left row with that key. (batch_id, row) names a row
uniquely and deterministically, so a redo of batch N (from version N-1) writes the same keys.
Eviction is a range scan of the time index up to the state watermark, deleting both entries.
Rows with a null event time are never indexed, hence never evicted.
"""
from __future__ import annotations

from typing import Any, Iterable

import pyarrow as pa

from state.encoding import decode_key, decode_value, encode_key, encode_prefix, encode_value

COUNT_KEY = encode_key(("#",))
TAGS = {"left": ("L", "l"), "right": ("R", "r")}


def read_counts(store) -> list[int]:
    raw = store.get(COUNT_KEY)
    return list(decode_value(raw)) if raw else [0, 0]


def write_counts(store, counts: list[int]) -> None:
    store.put(COUNT_KEY, encode_value(tuple(counts)))


def candidates(store, side: str, key_texts: Iterable[str]) -> list[tuple[bytes, tuple, bool, Any]]:
    """Every stored row of `side` whose key text is in key_texts: (storage key, row, matched, t)."""
    tag = TAGS[side][0]
    out = []
    for k in key_texts:
        for skey, raw in store.prefix_scan(encode_prefix((tag, k))):
            row, matched, t = decode_value(raw)
            out.append((skey, row, matched, t))
    return out


def put_row(store, side: str, key_text: str, batch_id: int, idx: int, row: tuple, matched: bool, t: Any,
            indexed: bool) -> None:
    tag, ttag = TAGS[side]
    store.put(encode_key((tag, key_text, batch_id, idx)), encode_value((row, bool(matched), t)))
    if indexed and t is not None:
        store.put(encode_key((ttag, int(t), batch_id, idx)), encode_value((key_text,)))


def mark_matched(store, skey: bytes, row: tuple, t: Any) -> None:
    store.put(skey, encode_value((row, True, t)))


def delete_row(store, side: str, skey: bytes, t: Any) -> None:
    """Delete one stored row (and its time-index entry) of `side`, named by its storage key."""
    _tag, ttag = TAGS[side]
    _, _key_text, b, i = decode_key(skey)
    store.delete(skey)
    if t is not None:
        store.delete(encode_key((ttag, int(t), b, i)))


def evict(store, side: str, state_watermark_us: int) -> list[tuple[tuple, bool]]:
    """Delete rows of `side` with event time (µs) <= state_watermark_us; return their (row, matched)."""
    tag, ttag = TAGS[side]
    start, end = encode_prefix((ttag,)), encode_key((ttag, int(state_watermark_us) + 1))
    index = list(store.range_scan(start, end))
    if not index:
        return []
    pkeys = []
    for ikey, raw in index:
        _, _t, b, i = decode_key(ikey)
        (key_text,) = decode_value(raw)
        pkeys.append(encode_key((tag, key_text, b, i)))
    out = []
    for (ikey, _), pkey, raw in zip(index, pkeys, store.multi_get(pkeys)):
        if raw is not None:
            row, matched, _t = decode_value(raw)
            out.append((row, matched))
            store.delete(pkey)
        store.delete(ikey)
    return out


def rows_to_table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    cols = list(zip(*rows)) if rows else [() for _ in schema]
    return pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, schema)], schema=schema)


def table_rows(table: pa.Table) -> list[tuple]:
    cols = [c.to_pylist() for c in table.columns]
    return list(zip(*cols)) if cols else []

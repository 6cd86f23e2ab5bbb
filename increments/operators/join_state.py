"""State layout of the stream-stream join: rows stored as Arrow chunks (one store per partition,
partition = md5 of the equality key's text).

Keys (state.encoding, order-preserving):
    ("C", "L"|"R", min event time µs, batch_id) -> Arrow IPC stream of one chunk
    ("#",) -> (left rows, right rows)                row counts of the partition
A chunk holds the rows one batch stored for one side in one partition, in their input order, with
the side's columns plus __k (equality key text), __t (event time µs, null when the side has no
state watermark or the row no event time) and __m (matched). Its key leads with the smallest
non-null __t of its rows (NO_TIME = 2^63-1 when none), so eviction up to a state watermark W is a
range scan of ("C", tag) .. ("C", tag, W + 1): every chunk holding a row with t <= W, and only those.
Changing a chunk (rows marked matched, semi-join deletions, partial eviction) rewrites it under its
new key (min time may grow) and deletes the old key; an emptied chunk is deleted. Everything is a
deterministic function of the state at N-1 and the batch, so a redo of batch N from version N-1
writes exactly the same keys and values (Arrow IPC output is deterministic).

read_state (binary key/value columns, no _schema.json): one row per chunk; decode_key(key) gives
("C", side tag, min time µs, batch id), and `chunk_rows(value)` (or pyarrow.ipc.open_stream) the
stored rows with their key text, event time and matched flag; the ("#",) row holds the counts.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state.encoding import decode_key, decode_value, encode_key, encode_value

LAYOUT = "chunks-v1"
COUNT_KEY = encode_key(("#",))
TAGS = {"left": "L", "right": "R"}
NO_TIME = (1 << 63) - 1
META = [pa.field("__k", pa.string()), pa.field("__t", pa.int64()), pa.field("__m", pa.bool_())]


def chunk_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(list(schema) + META)


def read_counts(store) -> list[int]:
    raw = store.get(COUNT_KEY)
    return list(decode_value(raw)) if raw else [0, 0]


def write_counts(store, counts: list[int]) -> None:
    store.put(COUNT_KEY, encode_value(tuple(counts)))


def chunk_min_time(skey: bytes) -> int:
    """The smallest event time (µs) of a stored chunk's rows, from its key (NO_TIME: none)."""
    return int(decode_key(skey)[2])


def chunk_rows(blob: bytes) -> pa.Table:
    """The rows of one stored chunk (side columns + __k, __t, __m)."""
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def _blob(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def chunk_key(side: str, table: pa.Table, batch_id: int) -> bytes:
    mn = pc.min(table.column("__t")).as_py()
    return encode_key(("C", TAGS[side], NO_TIME if mn is None else int(mn), int(batch_id)))


#: a side's chunks of one partition as stored: storage key -> (batch id, rows); the operator keeps
#: it between batches (StreamStreamJoinOp._mirrors) so that a batch reads no chunk it did not change
Mirror = dict


def scan(store, side: str) -> Mirror:
    """Every chunk of `side` in `store`, decoded."""
    return {skey: (decode_key(skey)[3], chunk_rows(raw)) for skey, raw in store.prefix_scan(encode_key(("C", TAGS[side])))}


def load(store, side: str, schema: pa.Schema, mirror: Mirror | None = None
         ) -> tuple[list[tuple[bytes, int]], pa.Table, Mirror, list[int]]:
    """Every chunk of `side`, in storage key order: ([(storage key, batch id)], one table of all
    their rows + __c chunk index, the mirror (read from the store when None is given), each
    chunk's first row in the table)."""
    if mirror is None:
        mirror = scan(store, side)
    cs = chunk_schema(schema)
    items = sorted(mirror.items())
    keys = [(skey, b) for skey, (b, _) in items]
    tables = [t if t.schema == cs else t.cast(cs) for _, (_, t) in items]
    sizes = [t.num_rows for t in tables]
    starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])[:-1].tolist() if sizes else []
    if not tables:
        return [], cs.append(pa.field("__c", pa.int32())).empty_table(), mirror, []
    cidx = np.repeat(np.arange(len(tables), dtype=np.int32), sizes)
    return keys, pa.concat_tables(tables).append_column("__c", pa.array(cidx, pa.int32())), mirror, starts


def put_chunk(store, side: str, table: pa.Table, batch_id: int, mirror: Mirror | None = None) -> None:
    if table.num_rows:
        key = chunk_key(side, table, batch_id)
        store.put(key, _blob(table))
        if mirror is not None:
            mirror[key] = (int(batch_id), table)


def rewrite_chunk(store, side: str, skey: bytes, batch_id: int, rows: pa.Table, mirror: Mirror | None = None) -> None:
    """Store chunk `skey`'s remaining `rows` (side columns + __k, __t, __m) under its new key, or
    delete it when none remain."""
    new_key = chunk_key(side, rows, batch_id) if rows.num_rows else None
    if new_key != skey:
        store.delete(skey)
        if mirror is not None:
            mirror.pop(skey, None)
    if rows.num_rows:
        store.put(new_key, _blob(rows))
        if mirror is not None:
            mirror[new_key] = (int(batch_id), rows)


# -- the loaded rows of a side, as the join reads and updates them ----------------------------------
def take_sorted(table: pa.Table, idx: np.ndarray) -> pa.Table:
    """table.take(idx) for ascending `idx`, record batch by record batch: O(len(idx) + batches),
    where a take on a table of many chunks first concatenates every chunk (O(rows))."""
    batches = table.to_batches()
    if len(batches) <= 1:
        return table.take(pa.array(idx, pa.int64()))
    bounds = np.cumsum([0] + [b.num_rows for b in batches])
    cut = np.searchsorted(idx, bounds)
    out = [b.take(pa.array(idx[cut[i]:cut[i + 1]] - bounds[i], pa.int64()))
           for i, b in enumerate(batches) if cut[i + 1] > cut[i]]
    return pa.Table.from_batches(out, schema=table.schema) if out else table.schema.empty_table()


def behind_mask(times: pa.Array, sw_us) -> np.ndarray:
    """Which rows (event time µs, nullable int64) are already behind their side's state watermark:
    t <= sw_us; never when the side has no state watermark or the row no event time."""
    if sw_us is None:
        return np.zeros(len(times), dtype=bool)
    return pc.fill_null(pc.less_equal(times, pa.scalar(int(sw_us), pa.int64())), False).to_numpy(zero_copy_only=False)


def annotate(table: pa.Table, n_stored: int, stored_matched, n_new: int, keep=None) -> pa.Table:
    """Add __rid (row number), __new, __m (matched before this batch) and __keep (a new row not
    already behind the state watermark) to a side's rows."""
    total = n_stored + n_new
    keep = np.asarray(keep, dtype=bool) if keep is not None else np.ones(n_new, dtype=bool)
    isnew = np.concatenate([np.zeros(n_stored, dtype=bool), np.ones(n_new, dtype=bool)])
    m = np.concatenate([np.asarray(stored_matched, dtype=bool), np.zeros(n_new, dtype=bool)])
    return (table.append_column("__rid", pa.array(np.arange(total, dtype=np.int64)))
            .append_column("__new", pa.array(isnew, pa.bool_()))
            .append_column("__m", pa.array(m, pa.bool_()))
            .append_column("__keep", pa.array(np.concatenate([np.ones(n_stored, dtype=bool), keep]), pa.bool_())))

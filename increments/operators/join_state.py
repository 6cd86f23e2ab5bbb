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

In memory only (never stored), the operator keeps beside each decoded chunk the 32-bit hashes of its
rows' key texts (Mirror.hashes, key_hashes), so that a batch finds the stored rows of its keys
(KeyProbe) without hashing every stored key text.

read_state (binary key/value columns, no _schema.json): one row per chunk; decode_key(key) gives
("C", side tag, min time µs, batch id), and `chunk_rows(value)` (or pyarrow.ipc.open_stream) the
stored rows with their key text, event time and matched flag; the ("#",) row holds the counts.
"""
from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state.encoding import decode_key, decode_value, encode_key, encode_value

from ..sql import run_sql

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


@functools.lru_cache(maxsize=1 << 16)
def chunk_min_time(skey: bytes) -> int:
    """The smallest event time (µs) of a stored chunk's rows, from its key (NO_TIME: none); cached:
    every batch asks it of every stored chunk (eviction)."""
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


class Mirror(dict):
    """A side's chunks of one partition as stored: storage key -> (batch id, rows); the operator keeps
    it between batches (StreamStreamJoinOp._mirrors) so that a batch reads no chunk it did not change.
    `hashes` (memory only, never stored): storage key -> the 32-bit hashes of the chunk's key texts
    (key_hashes), kept beside the rows so that a batch finds its candidates without hashing the
    stored key texts; a chunk without them is hashed when loaded."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.hashes: dict[bytes, np.ndarray] = {}


def scan(store, side: str) -> Mirror:
    """Every chunk of `side` in `store`, decoded."""
    return Mirror({skey: (decode_key(skey)[3], chunk_rows(raw))
                   for skey, raw in store.prefix_scan(encode_key(("C", TAGS[side])))})


def key_hash_sql(text: str) -> str:
    """SQL expression: the 64-bit DuckDB hash of a key text, of which key_hashes keeps the low 32 bits
    (equal texts, equal hashes; the candidate search only uses them to skip rows, then compares the
    texts)."""
    return f"hash({text})"


def key_hashes(texts) -> np.ndarray:
    """The uint32 hashes (key_hash_sql, low 32 bits) of key texts (an Arrow string array or column)."""
    if not len(texts):
        return np.empty(0, dtype=np.uint32)
    h = run_sql(f"SELECT {key_hash_sql('__k')} AS h FROM __e", {"__e": pa.table({"__k": texts})}).column(0)
    return h.to_numpy().astype(np.uint32)


def load(store, side: str, schema: pa.Schema, mirror: Mirror | None = None
         ) -> tuple[list[tuple[bytes, int]], pa.Table, Mirror, list[int], list[np.ndarray]]:
    """Every chunk of `side`, in storage key order: ([(storage key, batch id)], one table of all
    their rows, the mirror (read from the store when None is given), each chunk's first row in the
    table, each chunk's key hashes (key_hashes; computed for the chunks the mirror has none of))."""
    if mirror is None:
        mirror = scan(store, side)
    cs = chunk_schema(schema)
    items = sorted(mirror.items())
    keys = [(skey, b) for skey, (b, _) in items]
    tables = [t if t.schema == cs else t.cast(cs) for _, (_, t) in items]
    sizes = [t.num_rows for t in tables]
    starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])[:-1].tolist() if sizes else []
    if not tables:
        return [], cs.empty_table(), mirror, [], []
    missing = [i for i, (skey, _) in enumerate(keys) if skey not in mirror.hashes]
    if missing:
        h = key_hashes(pa.chunked_array([c for i in missing for c in tables[i].column("__k").chunks], pa.string()))
        at = np.concatenate([[0], np.cumsum([sizes[i] for i in missing])])
        for j, i in enumerate(missing):
            mirror.hashes[keys[i][0]] = h[at[j]:at[j + 1]]
    return keys, pa.concat_tables(tables), mirror, starts, [mirror.hashes[skey] for skey, _ in keys]


def put_chunk(store, side: str, table: pa.Table, batch_id: int, mirror: Mirror | None = None,
              hashes: np.ndarray | None = None) -> None:
    """Store a side's new rows of one partition as a chunk; `hashes`: their key_hashes, kept in the
    mirror (when None, the mirror hashes them when next loaded)."""
    if table.num_rows:
        key = chunk_key(side, table, batch_id)
        store.put(key, _blob(table))
        if mirror is not None:
            mirror[key] = (int(batch_id), table)
            _keep_hashes(mirror, key, hashes)


def rewrite_chunk(store, side: str, skey: bytes, batch_id: int, rows: pa.Table, mirror: Mirror | None = None,
                  hashes: np.ndarray | None = None) -> None:
    """Store chunk `skey`'s remaining `rows` (side columns + __k, __t, __m) under its new key, or
    delete it when none remain; `hashes` as in put_chunk."""
    new_key = chunk_key(side, rows, batch_id) if rows.num_rows else None
    if new_key != skey:
        store.delete(skey)
        if mirror is not None:
            mirror.pop(skey, None)
            mirror.hashes.pop(skey, None)
    if rows.num_rows:
        store.put(new_key, _blob(rows))
        if mirror is not None:
            mirror[new_key] = (int(batch_id), rows)
            _keep_hashes(mirror, new_key, hashes)


def _keep_hashes(mirror: Mirror, key: bytes, hashes: np.ndarray | None) -> None:
    if hashes is None:
        mirror.hashes.pop(key, None)
    else:
        mirror.hashes[key] = hashes


class KeyProbe:
    """Finds the stored rows whose key hash (key_hashes, uint32) may be among a batch's: two probes of
    a bitmap of >= 64 bits per wanted hash (2^12..2^24 bits), so every row whose hash is wanted and
    about rows * (wanted / bits)^2 others, for the caller to check exactly. The bitmaps are kept
    between calls (cleared after each) and the stored hashes probed chunk by chunk: no temporary
    array of the state's size is allocated per batch (a fresh one of megabytes costs a page fault
    per 4 KiB, more than the probe itself)."""

    def __init__(self):
        self._lo = self._hi = np.zeros(0, dtype=bool)

    def rows(self, pieces: list[np.ndarray], want: np.ndarray) -> np.ndarray:
        """Ascending row numbers (int64) over the concatenation of `pieces` (each chunk's hashes)."""
        if not len(want) or not any(len(h) for h in pieces):
            return np.empty(0, dtype=np.int64)
        k = min(24, max(12, (len(want) * 64 - 1).bit_length()))
        if len(self._lo) != 1 << k:
            self._lo, self._hi = np.zeros(1 << k, dtype=bool), np.zeros(1 << k, dtype=bool)
        lo, hi = self._lo, self._hi
        m, shift = np.uint32((1 << k) - 1), np.uint32(32 - k)
        wl, wh = want & m, want >> shift
        lo[wl] = True
        hi[wh] = True
        try:
            out, row0 = [], 0
            for h in pieces:
                c = np.flatnonzero(lo[h & m])
                c = c[hi[h[c] >> shift]]
                if len(c):
                    out.append(c + row0)
                row0 += len(h)
        finally:
            lo[wl] = False
            hi[wh] = False
        return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


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

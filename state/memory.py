"""In-memory state store provider: a dict plus a sorted key index, versioned as delta files
with a full snapshot every ``snapshot_interval`` versions (layout: state.files).

Commit of version N under a fresh token T (each step leaves N-1 loadable, see state.base):
  1. write ``N.T.delta`` create-only (the keys touched by the batch: new value or null =
     deleted; metadata names the parent token) -- from here (N, T) is loadable
  2. if N > 0 and N % snapshot_interval == 0: write ``N.T.snapshot`` (all rows) create-only,
     then cleanup (state.filebacked)

Loading (V, token): if this provider holds exactly (V, token) in memory (it committed or loaded
it) reuse it -- no request to the store; otherwise rebuild from the lineage of (V, token): its
newest snapshot plus the deltas after it (state.files.trace).
Abort restores the loaded version from an undo log (no copy of the state is taken).

The sorted key index (for range scans and snapshots) is built at the first ordered read, then kept
up to date: a store that is only read and written by key (a dedup's keys, a count's groups) never
pays for keeping its keys in order.

Rows written by ``insert_columns`` or ``put_columns`` (Arrow arrays: a dedup's keys and expiry index,
a count's groups) are kept as those arrays ("runs", state.memory_runs) while the store is written that
way, popped by range (``pop_range_keys``), removed by ``remove_columns`` and read by
``multi_get_columns`` of a batch not small against the runs (an Arrow hash lookup per run; a
``put_columns`` replaces the rows of its keys by its own run); the batch's changelog is then written
from the arrays. Any other read or write first moves the runs into the dict and the batch's run
operations into the undo log, exactly as if they had been insert_many / put_many, pop_range_keys and
remove_many calls (``_to_dict``): same content, counts, changelog rows in the same order, and abort.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from itertools import compress, repeat
from operator import is_, is_not

from increments.lazy import lazy_module

from . import files
from . import memory_runs as mr
from .base import StateMetrics, StateStore, StateStoreError
from .filebacked import FileBackedProvider
from .sortedkeys import SortedKeys, sorted_pairs

pa = lazy_module("pyarrow")

_ROW_OVERHEAD = 120  # rough per-row cost of dict entry + bytes headers + index slot


class _Loaded:
    """The in-memory content of one (operator, partition) at ``version``. ``index``: the sorted
    keys of ``data``, or None until an ordered read needs it (``ordered``)."""

    def __init__(self, version: int, token: str, data: dict, index: SortedKeys | None = None):
        self.version, self.token, self.data, self.index = version, token, data, index
        self.bytes = sum(map(len, data)) + sum(map(len, data.values()))
        self.runs: list = []       # rows kept as Arrow columns (state.memory_runs), none of them in data
        self.run_rows = 0

    def rows(self) -> int:
        return len(self.data) + self.run_rows

    def ordered(self) -> SortedKeys:
        """The index, built from the keys on first use and maintained by every write from then on."""
        if self.index is None:
            self.index = SortedKeys(sorted(self.data))
        return self.index


class MemoryStateStore(StateStore):
    def __init__(self, provider: MemoryStateStoreProvider, operator: str, partition: int,
                 loaded: _Loaded):
        self._provider, self.operator, self.partition = provider, operator, partition
        self._s = loaded
        self.version, self.token = loaded.version, loaded.token
        self._undo: dict[bytes, bytes | None] = {}
        # the first put_many or delete_many of a batch keeps its (keys, old values, new values) as they
        # are (new values None: all deleted): a dict of a million keys is built only if something else
        # touches the undo log (_undo_log) first, and the commit's changelog takes the lists as given
        self._bulk: tuple[list[bytes], list, list | None] | None = None
        self._bytes_at_load = loaded.bytes
        self._updated = self._removed = 0
        self._closed = False
        # run mode (see the module doc): the runs at the batch's first run operation (abort restores
        # them), the batch's insert_columns arrays, and per run-mode pop (popped keys in order other than
        # the batch's own, their values, the batch's own keys popped, the dict's keys popped, their values)
        self._runs0: list | None = None
        self._ins: tuple | None = None
        self._pops: list[tuple] = []
        self._cols = bool(loaded.runs)     # runs held, or run operations this batch: _to_dict first
        self._looked: tuple | None = None   # the last keyed read of the runs (_lookup_runs)

    # -- reads -------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        if self._cols:
            self._to_dict()
        return self._s.data.get(key)

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        if self._cols:
            self._to_dict()
        if not self._s.data:                 # an empty store (a first batch): nothing to look up
            return [None] * len(keys)
        g = self._s.data.get
        return [g(k) for k in keys]

    def multi_get_columns(self, keys) -> list[bytes | None]:
        keys = mr.plain(keys)
        if self._probe_runs(len(keys)):
            return self._lookup_runs(keys)[3]
        if self._cols:
            self._to_dict()
        if not self._s.data:
            return [None] * len(keys)
        return self.multi_get(keys.to_pylist())

    def _probe_runs(self, n: int) -> bool:
        """Whether a keyed read (and put_columns) of n keys works on the runs: looks them up by Arrow (a
        hash table of each run per call: worth it while the batch is not small against the runs) instead
        of moving them into the dict (once, for every later read). Only before the batch's first write."""
        s = self._s
        return (n >= mr.MIN_ROWS and not self._undo and self._bulk is None and self._ins is None and not self._pops
                and s.index is None and n * mr.PROBE_RATIO >= s.run_rows)

    def _lookup_runs(self, keys):
        """(signature, keys, per-run positions, values as a list, old values array, dict keys found,
        their positions) of a keyed read in run mode: the runs by index_in, the rest from the dict;
        kept for the put_columns of the same keys (the signature tells whether anything changed)."""
        s = self._s
        sig = (id(keys), id(s.runs), len(s.data), self._updated, self._removed)
        if self._looked is not None and self._looked[0] == sig and self._looked[1] is keys:
            return self._looked
        at, olds, rest = mr.lookup(s.runs, keys)
        dkeys, dpos = [], None
        if s.data and len(rest):
            import numpy as np  # noqa: PLC0415 - numpy stays off `import state` (the code location)
            rk = (keys if len(rest) == len(keys) else keys.take(pa.array(rest))).to_pylist()
            dv = list(map(s.data.get, rk))
            hit = np.fromiter(map(is_not, dv, repeat(None)), np.bool_, len(dv))
            if hit.any():
                dpos = rest[hit]
                dkeys = list(compress(rk, hit))
                olds = mr.fill_at(olds, dpos, list(compress(dv, hit)))
        values = olds.to_pylist()
        self._looked = (sig, keys, at, values, olds, dkeys, dpos)
        return self._looked

    def put_columns(self, keys, values) -> None:
        keys, values = mr.plain(keys), mr.plain(values)
        s = self._s
        if not self._probe_runs(len(keys)):
            if self._cols:
                self._to_dict()
            self.put_many(keys.to_pylist(), values.to_pylist())
            return
        _, _, at, _, olds, dkeys, _ = self._lookup_runs(keys)
        self._looked = None
        if self._runs0 is None:
            self._runs0 = list(s.runs)
        kept, gone_k, gone_v = mr.drop_rows(s.runs, at)
        dolds = list(map(s.data.pop, dkeys))
        n = len(keys)
        s.runs = kept + [(keys, values, True)]
        s.run_rows += n - gone_k
        s.bytes += mr.nbytes(keys) + mr.nbytes(values) - gone_v - sum(map(len, dkeys)) - sum(map(len, dolds))
        self._ins = (keys, values, olds)
        if dkeys:                                        # for abort: the dict's rows back (no changelog rows)
            self._pops.append(([], [], None, dkeys, dolds))
        self._updated += n
        self._cols = True

    def range_scan(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        if self._cols:
            self._to_dict()
        data = self._s.data
        for k in self._s.ordered().irange(start, end):
            v = data.get(k)
            if v is not None:
                yield k, v

    def range_keys(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        if self._cols:
            self._to_dict()
        return self._s.ordered().irange(start, end)       # the index holds exactly the stored keys

    def pop_range_keys(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        s = self._s
        if self._cols and not self._undo and self._bulk is None:
            return mr.as_list(self._pop_runs(start, end))
        if self._cols:
            self._to_dict()
        keys = s.ordered().pop_range(start, end)
        if keys:
            olds = list(map(s.data.pop, keys))
            self._bulk_undo(keys, olds, None)
            s.bytes -= sum(map(len, keys)) + sum(map(len, olds))
            self._removed += len(keys)
        return keys

    def pop_range_columns(self, start: bytes | None, end: bytes | None):
        if self._cols and not self._undo and self._bulk is None:
            return mr.as_array(self._pop_runs(start, end))
        return mr.as_array(self.pop_range_keys(start, end))

    def _pop_runs(self, start: bytes | None, end: bytes | None):
        """pop_range_keys in run mode: from the runs by Arrow compares, from the dict (rows it held at
        load) through the index; recorded for the changelog, abort and _to_dict. The keys in order: an
        Arrow array when they all come from committed runs, else a list."""
        s = self._s
        if self._runs0 is None:
            self._runs0 = list(s.runs)
        kept, (nk, nv), (ok, ov) = mr.pop_runs(s.runs, start, end)
        s.runs = kept
        dkeys = s.ordered().pop_range(start, end) if s.data else []
        dolds = list(map(s.data.pop, dkeys))
        if ok is not None and not dkeys and nk is None:        # only committed runs' rows: kept as arrays
            other_k, other_v = mr.sorted_arrays(ok, ov)
        else:
            other_k, other_v = mr.sorted_lists(ok, ov) if ok is not None else ([], [])
        if dkeys:
            other_k, other_v = sorted_pairs(other_k + dkeys, other_v + dolds) if other_k else (dkeys, dolds)
        new_sorted = mr.sorted_lists(nk)[0] if nk is not None else []
        out = list(heapq.merge(other_k, new_sorted)) if other_k and new_sorted else (other_k or new_sorted)
        from_runs = (len(nk) if nk is not None else 0) + (len(ok) if ok is not None else 0)
        s.run_rows -= from_runs
        s.bytes -= sum(mr.nbytes(a) for a in (nk, nv, ok, ov) if a is not None) + sum(map(len, dkeys)) + sum(map(len, dolds))
        self._pops.append((other_k, other_v, nk, dkeys, dolds))
        self._removed += len(out)
        return out

    def insert_columns(self, keys, values) -> None:
        s = self._s
        keys, values = mr.plain(keys), mr.plain(values)
        n = len(keys)
        if (n < 256 or self._undo or self._bulk is not None or self._ins is not None or self._pops
                or s.index is not None):
            if self._cols:
                self._to_dict()
            self.insert_many(keys.to_pylist(), values.to_pylist())
            return
        if self._runs0 is None:
            self._runs0 = list(s.runs)
        self._ins = (keys, values, None)
        s.runs = s.runs + [(keys, values, True)]
        s.run_rows += n
        s.bytes += mr.nbytes(keys) + mr.nbytes(values)
        self._updated += n
        self._cols = True

    def _to_dict(self) -> None:
        """Leave run mode: the runs' rows into the dict, the batch's run operations into the undo log as
        insert_many and pop_range_keys would have left it (the insert's keys first, absent at load;
        then each pop's other keys with their values)."""
        s = self._s
        self._cols = False
        if self._runs0 is None:
            self._runs0 = list(s.runs)
        ins, pops = self._ins, self._pops
        self._ins, self._pops = None, []
        moved: list[bytes] = []
        for k, v, _ in s.runs:
            kl = k.to_pylist()
            s.data.update(zip(kl, v.to_pylist()))
            moved += kl
        s.runs, s.run_rows = [], 0
        if s.index is not None and moved:
            s.index.add_many(moved)
        if ins is None and not pops:
            return
        undo = {}
        if ins is not None:
            undo = dict.fromkeys(ins[0].to_pylist()) if ins[2] is None else dict(zip(ins[0].to_pylist(), ins[2].to_pylist()))
        for other_k, other_v, _, _, _ in pops:
            deque(map(undo.setdefault, mr.as_list(other_k), mr.as_list(other_v)), maxlen=0)
        self._undo, self._bulk = undo, None

    # -- writes ------------------------------------------------------------------------
    def put(self, key: bytes, value: bytes) -> None:
        if self._cols:
            self._to_dict()
        s = self._s
        old = s.data.get(key)
        undo = self._undo_log()
        if key not in undo:
            undo[key] = old
        if old is None:
            if s.index is not None:
                s.index.add(key)
            s.bytes += len(key) + len(value)
        else:
            s.bytes += len(value) - len(old)
        s.data[key] = bytes(value)
        self._updated += 1

    def put_many(self, keys: list[bytes], values: list[bytes]) -> None:
        if self._cols:
            self._to_dict()
        s = self._s
        olds = list(map(s.data.get, keys)) if s.data else [None] * len(keys)
        self._put_many(keys, values, olds, list(compress(keys, map(is_, olds, repeat(None)))))

    def insert_many(self, keys: list[bytes], values: list[bytes]) -> None:
        if self._cols:
            self._to_dict()
        self._put_many(keys, values, [None] * len(keys), keys)

    def _put_many(self, keys: list[bytes], values: list[bytes], olds: list, new: list[bytes]) -> None:
        s = self._s
        self._bulk_undo(keys, olds, values)
        if new and s.index is not None:
            s.index.add_many(new)
        s.bytes += sum(map(len, new)) + sum(map(len, values)) - sum(map(len, filter(None, olds)))
        s.data.update(zip(keys, values))
        self._updated += len(keys)

    def _bulk_undo(self, keys: list[bytes], olds: list, news: list | None) -> None:
        """Record (keys, their values before) in the undo log: kept as given when it is the batch's
        first write (see __init__), folded into the log's dict otherwise."""
        if self._undo or self._bulk is not None:
            deque(map(self._undo_log().setdefault, keys, olds), maxlen=0)
        else:
            self._bulk = (keys, olds, news)

    def delete(self, key: bytes) -> None:
        if self._cols:
            self._to_dict()
        s = self._s
        old = s.data.pop(key, None)
        if old is None:
            return
        undo = self._undo_log()
        if key not in undo:
            undo[key] = old
        if s.index is not None:
            s.index.discard(key)
        s.bytes -= len(key) + len(old)
        self._removed += 1

    def delete_many(self, keys: list[bytes]) -> None:
        if self._cols:
            self._to_dict()
        s = self._s
        olds = list(map(s.data.pop, keys, repeat(None)))
        present = list(map(is_not, olds, repeat(None)))
        gone, gone_olds = list(compress(keys, present)), list(compress(olds, present))
        if gone:
            self._forget(gone, gone_olds)

    def remove_many(self, keys: list[bytes]) -> None:
        """``delete_many`` without sorting out absent keys (the caller knows each one is stored);
        should one be absent after all, the result is still delete_many's."""
        if self._cols:
            self._to_dict()
        s = self._s
        olds = list(map(s.data.pop, keys, repeat(None)))
        if None in olds:
            for k, old in zip(keys, olds):            # put back, then the general path
                if old is not None:
                    s.data[k] = old
            self.delete_many(keys)
            return
        if keys:
            self._forget(keys, olds)

    def remove_columns(self, keys) -> None:
        keys = mr.plain(keys)
        if self._cols and not self._undo and self._bulk is None:
            self._remove_runs(keys)
        else:
            self.remove_many(keys.to_pylist())

    def _remove_runs(self, keys) -> None:
        """remove_columns in run mode: from the runs by Arrow's hash lookups, the rest from the dict (rows
        it held at load); recorded as a pop of _pop_runs (changelog, abort, _to_dict), the keys removed
        from other than the batch's own run in the order given (as remove_many leaves the undo log)."""
        s = self._s
        if self._runs0 is None:
            self._runs0 = list(s.runs)
        kept, (nk, nv), others, (rest, rpos) = mr.remove_keys(s.runs, keys)
        s.runs = kept
        dkeys = rest.to_pylist() if len(rest) else []
        dolds = list(map(s.data.pop, dkeys, repeat(None)))
        if None in dolds:                                # absent after all: as delete_many, not removed
            present = list(map(is_not, dolds, repeat(None)))
            dkeys, dolds = list(compress(dkeys, present)), list(compress(dolds, present))
            rpos = rpos[[i for i, p in enumerate(present) if p]]
        if dkeys and s.index is not None:
            s.index.discard_many(dkeys)
        parts = ([others] if others is not None else []) + (
            [(mr.as_array(dkeys), mr.as_array(dolds), rpos)] if dkeys else [])
        other_k, other_v = mr.in_order(parts) if parts else ([], [])
        popped = [a for a in (nk, nv) + (others[:2] if others is not None else ()) if a is not None]
        from_runs = (len(nk) if nk is not None else 0) + (len(others[0]) if others is not None else 0)
        s.run_rows -= from_runs
        s.bytes -= sum(map(mr.nbytes, popped)) + sum(map(len, dkeys)) + sum(map(len, dolds))
        self._pops.append((other_k, other_v, nk, dkeys, dolds))
        self._removed += from_runs + len(dkeys)

    def _forget(self, keys: list[bytes], olds: list[bytes]) -> None:
        """The bookkeeping of keys just popped from the data with their old values: undo log,
        index, byte count, removed count."""
        s = self._s
        self._bulk_undo(keys, olds, None)
        if s.index is not None:
            s.index.discard_many(keys)
        s.bytes -= sum(map(len, keys)) + sum(map(len, olds))
        self._removed += len(keys)

    def _undo_log(self) -> dict[bytes, bytes | None]:
        """The undo log (key -> value at load, None: absent), with a kept put_many folded in first."""
        if self._bulk is not None:
            keys, olds, _ = self._bulk
            self._bulk = None
            later, self._undo = self._undo, dict(zip(keys, olds))
            self._undo.update(later)      # empty: anything later folds the bulk in first
        return self._undo

    # -- lifecycle ---------------------------------------------------------------------
    def commit(self, version: int) -> int:
        self._check_open()
        self._check_commit_version(version)
        keys, values = self._delta()
        token = self._provider._commit(self, version, keys, values, self._s.rows())
        self._s.version, self._s.token = version, token
        self.version, self.token = version, token
        self._undo.clear()
        self._bulk = None
        self._s.runs = mr.compact(self._s.runs)
        self._runs0, self._ins, self._pops = None, None, []
        self._looked = None
        self._cols = bool(self._s.runs)
        self._bytes_at_load = self._s.bytes
        self._updated = self._removed = 0
        return version

    def _delta(self) -> tuple[list[bytes], list]:
        if self._ins is not None or self._pops:          # run mode: the arrays (see _to_dict for the order)
            keys, values = [], []
            if self._ins is not None:
                ik, iv, _ = self._ins
                gone = [nk for _, _, nk, _, _ in self._pops if nk is not None]
                if gone:
                    iv = mr.null_where_in(ik, iv, gone)
                keys.append(ik)
                values.append(iv)
            for other_k, _, _, _, _ in self._pops:
                if len(other_k):
                    keys.append(other_k)
                    values.append(None)
            return mr.changes(keys, values)
        if self._bulk is not None and not self._undo:     # the batch's one bulk write: its lists as given
            keys, _, news = self._bulk
            return keys, ([None] * len(keys) if news is None else news)
        keys = list(self._undo_log())
        return keys, list(map(self._s.data.get, keys))

    def abort(self) -> None:
        s = self._s
        for _, _, _, dkeys, dolds in self._pops:         # run mode: the dict's popped rows back
            s.data.update(zip(dkeys, dolds))
            if dkeys:
                s.index = None                           # rebuilt from the dict at the next ordered read
        for k, old in self._undo_log().items():
            if old is None:
                if s.data.pop(k, None) is not None and s.index is not None:
                    s.index.discard(k)
            else:
                if k not in s.data and s.index is not None:
                    s.index.add(k)
                s.data[k] = old
        self._undo.clear()
        self._bulk = None
        if self._runs0 is not None:                      # the runs as loaded; rows moved from them dropped
            for k, _, _ in self._runs0:
                deque(map(s.data.pop, k.to_pylist(), repeat(None)), maxlen=0)
            s.runs, s.run_rows = self._runs0, sum(len(r[0]) for r in self._runs0)
            s.index = None
        self._runs0, self._ins, self._pops = None, None, []
        self._looked = None
        self._cols = bool(s.runs)
        s.bytes = self._bytes_at_load
        self._updated = self._removed = 0

    def metrics(self) -> StateMetrics:
        s = self._s
        return StateMetrics(s.rows(), self._updated, self._removed,
                            s.bytes + _ROW_OVERHEAD * len(s.data))

    def close(self) -> None:
        if not self._closed:
            self.abort()
            self._closed = True
            self._provider._release(self)

    def _check_open(self) -> None:
        if self._closed:
            raise StateStoreError(f"operator {self.operator!r} partition {self.partition}: "
                                  "store is closed")


class MemoryStateStoreProvider(FileBackedProvider):
    log_kind = "delta"

    def __init__(self, checkpoint, **conf):
        super().__init__(checkpoint, **conf)
        self._loaded: dict[tuple[str, int], _Loaded] = {}

    def _load(self, operator: str, partition: int, version: int, token: str | None) -> MemoryStateStore:
        key = (operator, partition)
        cached = self._loaded.get(key)
        if cached is None or cached.version != version or (
                version >= 0 and cached.token != self.resolve(operator, partition, version, token)):
            self._loaded.pop(key, None)
            cached = self._rebuild(operator, partition, version, token)
            self._loaded[key] = cached
        return MemoryStateStore(self, operator, partition, cached)

    def is_cached(self, operator: str, partition: int, version: int, token: str | None) -> bool:
        cached = self._loaded.get((operator, partition))
        return (cached is not None and token is not None and version >= 0
                and cached.version == version and cached.token == token)

    def _rebuild(self, operator: str, partition: int, version: int, token: str | None) -> _Loaded:
        key = (operator, partition)
        if version < 0:
            self._lineages[key] = {}
            return _Loaded(-1, "", {})
        loc = self.store_loc(operator, partition)
        token, tr = self.trace(operator, partition, version, token)
        data: dict[bytes, bytes] = {}
        rows = 0
        if tr.snapshot is not None:
            meta, keys, values = files.decode_rows(loc.read_bytes(files.snapshot_name(*tr.snapshot)))
            data, rows = dict(zip(keys, values)), meta["rows"]
        for meta, keys, values in tr.logs:
            for k, val in zip(keys, values):
                if val is None:
                    data.pop(k, None)
                else:
                    data[k] = val
            rows = meta["rows"]
        if rows != len(data):
            raise StateStoreError(f"cannot load state version {version} of {self.where(operator, partition)}: "
                                  f"{len(data)} rows rebuilt, {rows} recorded")
        self._lineages[key] = tr.lineage
        return _Loaded(version, token, data)        # the index: at the first ordered read, if any

    def _write_version(self, store: MemoryStateStore, meta: dict, keys: list[bytes], values: list,
                       lineage: dict[int, str]) -> None:
        loc = self.store_loc(store.operator, store.partition)
        version, token = meta["version"], meta["token"]
        files.put(loc, files.log_name(version, token, "delta"), files.encode_rows(keys, values, meta))
        if self.cleanup_due(version):
            if store._cols:
                store._to_dict()          # the snapshot writes the rows in key order, from the dict
            self._write_snapshot(loc, store._s, meta)

    @staticmethod
    def _write_snapshot(loc, s: _Loaded, meta: dict) -> None:
        keys = list(s.ordered())
        files.put(loc, files.snapshot_name(meta["version"], meta["token"]),
                  files.encode_rows(keys, [s.data[k] for k in keys], meta))

    def _close(self) -> None:
        self._loaded.clear()

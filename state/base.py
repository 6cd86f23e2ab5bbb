"""The versioned state store interface.

A *store* holds the state of one (operator, partition) of a query, loaded at some version.
Its files live under ``checkpoint.child("state", operator, str(partition))`` on any
``increments.storage.Location`` (local disk or an object store); see state.files for the layout.

Version protocol (version == batch id)
--------------------------------------
* Batch N opens version N-1 with the token the commit log records for it (``-1`` = empty, before
  any commit), reads and writes, then ``commit(N)``; ``store.token`` is then the token of the new
  version N (a fresh uuid per commit attempt), which the engine records in commits[N].
  Every batch commits every partition; a commit with no changes (a partition the batch did not
  touch) writes no file: its token is derived from the parent's (state.files.derived_token) and
  loading follows it to the version it equals. Versions due for a snapshot are always written.
* ``abort()`` (or ``close()`` without commit) discards the batch's changes; the store is back
  at the loaded version.
* A redo of batch N opens N-1 again and commits N again under a new token. Nothing of the
  earlier attempt is overwritten or deleted: every file is written create-only under a name that
  carries its version and token, and each version records its parent token. Two attempts of one
  batch (a redo, or a zombie runner that lost the fence) therefore both leave their version
  loadable by token; the commit log decides which one counts.
* Recovery rule: a crash between any two steps of a commit leaves version N-1 loadable; the
  attempt's version N is either absent or complete (each object is written whole).
* Retention deletes only versions below the newest snapshot of the store's own lineage at or below
  ``N - retention_versions + 1`` (and below N): files every attempt of N shares, none a winner needs.

Threading: a store is used by one thread at a time; distinct (operator, partition) stores of
one provider may be used from different threads.  At most one open store per
(operator, partition) per provider.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator

from increments import storage

from .encoding import prefix_end
from .memory_runs import as_array


class StateStoreError(RuntimeError):
    """A state version cannot be loaded or committed."""


@dataclass
class StateMetrics:
    num_rows_total: int = 0        # exact row count of the store (after uncommitted changes)
    num_rows_updated: int = 0      # put() calls since load
    num_rows_removed: int = 0      # existing rows deleted since load (delete + delete_range)
    memory_used_bytes: int = 0     # approximate


class StateStore(ABC):
    """One (operator, partition) at ``version`` plus uncommitted changes.

    After ``commit(v)`` the store is at version ``v`` and may keep being used for batch v+1.
    """

    operator: str
    partition: int
    version: int
    token: str = ""       # the token of `version` ("" for -1); after commit, the new version's

    @abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    def multi_get(self, keys: list[bytes]) -> list[bytes | None]:
        """``[get(k) for k in keys]`` (providers answer it without a Python call per key)."""
        return [self.get(k) for k in keys]

    def multi_get_columns(self, keys) -> list[bytes | None]:
        """``multi_get`` for keys given as an Arrow binary array (the memory provider answers an
        empty store without a Python object per key)."""
        return self.multi_get(keys.to_pylist())

    @abstractmethod
    def put(self, key: bytes, value: bytes) -> None: ...

    def put_many(self, keys: list[bytes], values: list[bytes]) -> None:
        """``put(k, v)`` for every pair, for DISTINCT keys (a batch's groups): the providers do it
        without a Python call per key (the same content, metrics and changelog as the loop)."""
        for k, v in zip(keys, values):
            self.put(k, v)

    def insert_many(self, keys: list[bytes], values: list[bytes]) -> None:
        """``put_many`` for DISTINCT keys the store does not hold (the caller has just read them as
        None, e.g. by ``multi_get``): a provider may skip looking them up again."""
        self.put_many(keys, values)

    def put_columns(self, keys, values) -> None:
        """``put_many`` for DISTINCT keys and values given as Arrow binary arrays (the memory provider
        may keep them as arrays, replacing the rows of those keys it keeps so: state.memory_runs)."""
        self.put_many(keys.to_pylist(), values.to_pylist())

    def insert_columns(self, keys, values) -> None:
        """``insert_many`` for keys and values given as Arrow binary arrays (the memory provider may
        keep them as arrays: state.memory_runs)."""
        self.insert_many(keys.to_pylist(), values.to_pylist())

    @abstractmethod
    def delete(self, key: bytes) -> None: ...

    @abstractmethod
    def range_scan(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Rows with start <= key < end (None = unbounded), ordered by key bytes.
        The result reflects the state when the scan starts; writing while iterating is allowed."""

    def prefix_scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.range_scan(prefix or None, prefix_end(prefix))

    def iter_all(self) -> Iterator[tuple[bytes, bytes]]:
        return self.range_scan(None, None)

    def range_keys(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        """The keys of ``range_scan(start, end)``, in order, as a list."""
        return [k for k, _ in self.range_scan(start, end)]

    def delete_many(self, keys: list[bytes]) -> None:
        """``delete(k)`` for every key, for DISTINCT keys (eviction): the providers do it without a
        Python call per key."""
        for k in keys:
            self.delete(k)

    def remove_many(self, keys: list[bytes]) -> None:
        """``delete_many`` for DISTINCT keys the caller knows the store holds (an eviction found through
        a side index): a provider may skip checking which of them exist."""
        self.delete_many(keys)

    def remove_columns(self, keys) -> None:
        """``remove_many`` for keys given as an Arrow binary array (the memory provider removes them
        from the arrays it keeps without a Python object per key: state.memory_runs)."""
        self.remove_many(keys.to_pylist())

    def pop_range_keys(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        """Delete the rows with start <= key < end and return their keys, in order (an eviction
        that needs the evicted keys): ``range_keys`` then ``delete_many`` of them."""
        keys = self.range_keys(start, end)
        self.delete_many(keys)
        return keys

    def pop_range_columns(self, start: bytes | None, end: bytes | None):
        """``pop_range_keys`` with the keys as one Arrow binary array (the memory provider may hand
        over the arrays it holds: state.memory_runs)."""
        return as_array(self.pop_range_keys(start, end))

    def delete_range(self, start: bytes | None, end: bytes | None) -> int:
        """Delete rows with start <= key < end; returns the number of rows removed."""
        keys = self.range_keys(start, end)
        self.delete_many(keys)
        return len(keys)

    @abstractmethod
    def commit(self, version: int) -> int:
        """Make ``version`` (== loaded version + 1) durable in the checkpoint; returns it."""

    @abstractmethod
    def abort(self) -> None: ...

    @abstractmethod
    def metrics(self) -> StateMetrics: ...

    @abstractmethod
    def close(self) -> None:
        """Release the store; uncommitted changes are aborted."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_commit_version(self, version: int) -> None:
        if version != self.version + 1:
            raise StateStoreError(
                f"operator {self.operator!r} partition {self.partition}: cannot commit version "
                f"{version} on a store loaded at version {self.version} (expected {self.version + 1})")


class StateStoreProvider(ABC):
    """Opens stores of one checkpoint.  ``close()`` waits for background work and closes
    every open store and working copy."""

    def __init__(self, checkpoint, *, changelog_checkpointing: bool = True,
                 snapshot_interval: int = 10, retention_versions: int = 100,
                 storage_options: dict | None = None):
        if snapshot_interval < 1 or retention_versions < 1:
            raise ValueError("snapshot_interval and retention_versions must be >= 1")
        self.checkpoint = storage.location(checkpoint, storage_options)
        self.checkpoint_dir = self.checkpoint.url          # for messages
        self.changelog_checkpointing = changelog_checkpointing
        self.snapshot_interval = snapshot_interval
        self.retention_versions = retention_versions

    @abstractmethod
    def open(self, operator: str, partition: int, version: int, token: str | None = None) -> StateStore:
        """The store of (operator, partition) at ``version`` as written by the attempt ``token``
        (the token the commit log records; None: version -1, or the only attempt that wrote
        ``version`` -- StateStoreError when there are several)."""

    def is_cached(self, operator: str, partition: int, version: int, token: str | None) -> bool:
        """Whether ``open(operator, partition, version, token)`` would be served from what this
        provider holds (in memory, or a verified working copy) without reading the checkpoint.
        A hint for callers deciding whether opens are worth running in parallel; open() checks
        again either way."""
        return False

    def warm(self, operator: str, partition: int) -> None:
        """Prepare what ``open(operator, partition, ...)`` will need that does not depend on the
        version (a local cache to open, say), ahead of the first open. Never loads or checks a
        version, never writes to the checkpoint; open() does everything it needs either way.
        Default: nothing."""

    @abstractmethod
    def latest_version(self, operator: str, partition: int) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

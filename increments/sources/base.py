"""The source interface.

Contract:
- Offsets are JSON values. `initial_offset()` is the start of batch 0 (exclusive).
- `latest_offset(start, limited)` is called only in the plan step; it may persist the source's
  own metadata for the offset it returns (the file source's seen-files entry), create-only under
  own_files(), never overwriting what is there: a plan that finds such metadata adopts it (it is
  either the orphan of a plan that never reached offsets[N], which no batch referenced, or a
  concurrent runner's, which may win the fence and must stay as it wrote it).
- `read(start, end)` must return the same rows every time it is called with the same offsets
  (replay): that is what makes a redo of batch N exact. A source whose `reads_columns` is True
  also takes `columns=` (the only columns the query reads, plan.scan_columns) and may leave the
  others null; the rows and their number do not change.
- `prepare_available_now()` fixes the target the AvailableNow trigger drains to; afterwards
  `latest_offset` never goes past it.
"""
from __future__ import annotations

import copy
import json
from abc import ABC, abstractmethod
from typing import Any

from ..lazy import lazy_module

from .. import storage
from ..storage import Location

pa = lazy_module("pyarrow")  # loaded at first use: increments/lazy.py


class Source(ABC):
    #: set by open(): the source's position in the query, the query's checkpoint (a Location; the
    #: source's own files live under checkpoint.child("sources", str(index))) and the query-level
    #: storage_options (a source merges its own storage_options= over them)
    index: int = 0
    checkpoint: Location | None = None
    query_name: str = ""
    query_storage_options: dict[str, Any] = {}
    #: the query's local_dir option, set by the runtime before open() (storage.private_dir's root for
    #: local copies such as fetched objects; None: INCREMENTS_LOCAL_DIR or the temp dir)
    local_dir: str | None = None
    #: read() takes columns= (the only columns the query reads) and may leave the others null
    reads_columns: bool = False
    #: the attributes one query's run sets on its source, with their initial values (for_query)
    _per_query: dict[str, Any] = {}

    def for_query(self) -> "Source":
        """This source for one query: a shallow copy sharing the configuration (and caches of
        facts that do not change, such as an inferred schema) with its own per-query state
        (checkpoint, seen-files log, client, AvailableNow target, read-ahead). Each query started
        from a frame gets its own, so one frame can feed several queries, as in Spark."""
        clone = copy.copy(self)
        for name, value in {"index": 0, "checkpoint": None, "query_name": "", "query_storage_options": {},
                            "local_dir": None,
                            **self._per_query}.items():
            setattr(clone, name, copy.copy(value))
        return clone

    @property
    @abstractmethod
    def description(self) -> str: ...

    @abstractmethod
    def schema(self) -> pa.Schema: ...

    def open(self, checkpoint: Location | str, index: int, query_name: str,
             storage_options: dict[str, Any] | None = None) -> None:
        """Attach to the query's checkpoint (its files under sources/<index>/) before the first plan.
        `checkpoint` is a Location (a path or URL is accepted: made with `storage_options`);
        `storage_options` are the query-level ones. (The runtime sets `local_dir` before.)"""
        self.checkpoint = storage.location(checkpoint, storage_options)
        self.index, self.query_name = index, query_name
        self.query_storage_options = dict(storage_options or {})

    def own_files(self) -> Location:
        """Where this source keeps its files in the checkpoint: sources/<index>/."""
        assert self.checkpoint is not None, "open() the source first"
        return self.checkpoint.child("sources", str(self.index))

    @abstractmethod
    def initial_offset(self) -> Any: ...

    def pinned_initial_offset(self, resolve: Any) -> Any:
        """A start offset that depends on when it is resolved ("latest"), fixed once per checkpoint:
        sources/<i>/initial.json, written create-only, is adopted by every later start (a restart,
        or a concurrent runner that wrote it first); `resolve()` computes it the first time."""
        own = self.own_files() if self.checkpoint is not None else None
        if own is not None:
            try:
                return json.loads(own.read_bytes("initial.json"))
            except FileNotFoundError:
                pass
        out = resolve()
        if own is not None:
            try:
                own.write_bytes("initial.json", json.dumps(out, sort_keys=True).encode(), create_only=True)
            except FileExistsError:
                return json.loads(own.read_bytes("initial.json"))
        return out

    @abstractmethod
    def latest_offset(self, start: Any, limited: bool = True) -> Any:
        """The end offset of the next batch from `start`; `start` if there is nothing new."""

    @abstractmethod
    def read(self, start: Any, end: Any) -> pa.Table: ...

    def prepare_available_now(self) -> None:
        """Fix the AvailableNow target at what is available now (default: nothing to fix)."""

    def enable_read_ahead(self, columns: list[str] | None = None) -> None:
        """The caller runs the next batches in this process (the local runner), reading `columns`
        (None: all): a source may prepare their data in the background (default: nothing).
        Runners that exit after one step (Dagster ops) do not call it."""

    def prepare_rows_with(self, prepare: Any) -> None:
        """The local runner's hook for rows read ahead: a source that decodes the next batches in
        the background may call `prepare(table)` on each decoded table there (default: ignored).
        The batch must then read exactly that table object for the work to be reused."""

    def available_now_target(self) -> Any:
        return None

    def set_available_now_target(self, target: Any) -> None:
        """Restore a drain's target (the Dagster drain stores it in the log)."""

    def has_new_data(self, start: Any, end: Any) -> bool:
        return start != end

    def commit(self, end: Any) -> None:
        """Called after commits[N]; sources may clean up what they no longer need."""

    def close(self) -> None:
        pass

    def backlog(self, end: Any) -> dict[str, Any] | None:
        """What is available beyond `end` (for lag metrics), when the source can tell cheaply."""
        return None

    def changed_since_read(self, end: Any) -> list[tuple[bool, str]]:
        """Input read by batches up to `end` that changed since (rows no batch will read),
        side-effect free (no log, no raise, nothing written): (whether the next plan fails on it,
        a message naming it) per change. Asked by the Dagster trigger sensor when there is no new
        data: a change the plan fails on gets a run (which fails naming it), another is named in
        the skip reason. Default: nothing (a source whose input cannot change once read)."""
        return []

    def fail(self, msg: str) -> str:
        return f"query {self.query_name!r}, source {self.index} ({self.description}): {msg}"

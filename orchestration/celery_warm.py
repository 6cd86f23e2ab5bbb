"""Warm state for long-lived Celery workers (orchestration/celery.py): with INCREMENTS_WARM_STATE=1
(set by `python -m orchestration.celery worker`) a query's RocksDB state provider -- its open
working copies -- outlives the run that opened it and is handed to the query's next run in this
process (runner.runtime_for_run / release_run). Reuse is safe: every open checks the working copy's
(version, token) against commits[N-1]'s token (state/rocksdb_provider.py `_is_current`), so a copy
another worker advanced, or a lost attempt's version, is rebuilt from the checkpoint. No dagster here.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator

from increments.execution.partitioned import _base_tokens, stateful_op

WARM_ENV = "INCREMENTS_WARM_STATE"
WORKER_TAG = "increments/celery_worker"     # run tag: the Celery worker (node name) that executes the run


_WARM: dict[str, tuple[tuple, Any]] = {}


def warm_enabled() -> bool:
    return os.environ.get(WARM_ENV) == "1"


def _signature(state: Any) -> tuple:
    return (str(getattr(state.checkpoint, "url", state.checkpoint)), state.provider_name, state.partitions,
            state.changelog, state.local_dir)


def keep_provider(key: str, rt: Any) -> None:
    """Before closing a run's runtime in a warm worker: keep its RocksDB provider (open working
    copies) for the query's next run in this process."""
    state = getattr(rt, "state", None)
    if not warm_enabled() or state is None or state._provider is None or state.provider_name != "rocksdb":
        return
    old = _WARM.pop(key, None)
    if old is not None and old[1] is not state._provider:
        _close(old[1])
    _WARM[key] = (_signature(state), state._provider)
    state._provider = None


def reuse_provider(key: str, rt: Any) -> None:
    """A new runtime of the query: hand it the kept provider when its checkpoint and state conf match."""
    kept = _WARM.pop(key, None)
    if kept is None:
        return
    state = getattr(rt, "state", None)
    if state is not None and state._provider is None and _signature(state) == kept[0]:
        state._provider = kept[1]
    else:
        _close(kept[1])


def _close(provider: Any) -> None:
    try:
        provider.close()
    except Exception:  # noqa: BLE001 - closing a cache is best effort
        pass


def partition_warmth(rt: Any, batch_id: int, p: int) -> dict[str, Any]:
    """Metadata of a partition op: the worker it ran on ($INCREMENTS_CELERY_WORKER, set by the
    worker command) and whether partition p's state opens from this process's working copy as
    it is ("warm": commits[N-1]'s token matches) or is loaded from the checkpoint ("cold")."""
    out: dict[str, Any] = {"worker": os.environ.get("INCREMENTS_CELERY_WORKER") or f"pid {os.getpid()}"}
    try:
        s = stateful_op(rt.plan)
        if s is not None:
            tokens = (_base_tokens(rt, batch_id) or {}).get(s.operator_id) or []
            token = tokens[p] if p < len(tokens) else None
            cached = rt.state.provider.is_cached(s.operator_id, p, batch_id - 1, token)
            out["state_open"] = "warm" if cached else "cold"
    except Exception:  # noqa: BLE001 - metadata only
        pass
    return out


@contextlib.contextmanager
def imports_during(out: dict[str, Any]) -> Iterator[None]:
    """out["modules_imported"] = modules this process imported inside the block (a partition op:
    0 in a warm worker's steady state; a fresh op process imports the engine's libraries here)."""
    before = len(sys.modules)
    try:
        yield
    finally:
        out["modules_imported"] = len(sys.modules) - before

"""Query listeners (Spark's StreamingQueryListener), registered globally or per query.

Events: on_query_started(event), on_query_progress(progress dict), on_query_terminated(event),
and on_batch_step(query_name, batch_id, step) after each protocol step (plan, read, process,
write, commit) completes, for tracing.

A listener that raises in on_query_started, on_query_progress or on_query_terminated is logged and
never fails a batch. An exception raised by on_batch_step is not caught (notify lets it propagate,
on purpose): it leaves the step that just completed, so the batch stops at that exact protocol
step, its work done and staged, the later steps not run, commits[N] unwritten unless the step was
commit; the local runner fails the query with it (StreamingQueryException), a Dagster op retries
the step. That is what a step hook is for beyond tracing: stopping a batch at a chosen step, as the
crash tests do (tests/crashkit.py's CrashAt kills the process from it; recovery then redoes N).
"""
from __future__ import annotations

import threading
from typing import Any

from ..redaction import logger as redacting_logger

log = redacting_logger("increments.listeners")
_GLOBAL: list[Any] = []
_LOCK = threading.Lock()


class StreamingQueryListener:
    def on_query_started(self, event: dict[str, Any]) -> None: ...
    def on_query_progress(self, progress: dict[str, Any]) -> None: ...
    def on_query_terminated(self, event: dict[str, Any]) -> None: ...
    def on_batch_step(self, query_name: str, batch_id: int, step: str) -> None: ...


class StreamingQueryManager:
    """`inc.streams`: the active queries of this process and the global listeners."""

    def __init__(self):
        self.active: dict[str, Any] = {}

    def add_listener(self, listener: Any) -> None:
        with _LOCK:
            _GLOBAL.append(listener)

    def remove_listener(self, listener: Any) -> None:
        with _LOCK:
            if listener in _GLOBAL:
                _GLOBAL.remove(listener)

    def get(self, query_id: str) -> Any:
        return self.active.get(query_id)


#: `inc.streams` (increments/__init__.py re-exports it): the one manager of this process; the
#: engine (execution/query.py, api/writer.py) imports it from here, not from the package root
streams = StreamingQueryManager()


def notify(rt: Any, event: str, *args: Any) -> None:
    with _LOCK:
        targets = list(_GLOBAL) + list(rt.listeners)
    if event == "on_batch_step":
        args = (rt.name,) + args
    for li in targets:
        fn = getattr(li, event, None)
        if fn is None:
            continue
        if event == "on_batch_step":
            fn(*args)  # step hooks may deliberately stop the process (crash tests); let them raise
            continue
        try:
            fn(*args)
        except Exception:  # noqa: BLE001
            log.exception("listener %r failed on %s", li, event)

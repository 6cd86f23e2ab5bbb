"""StreamingQuery and the local runner: the five protocol steps in order, under a trigger.

`start()` runs the query on a background thread (as Spark does); `await_termination()` waits
and re-raises a failure as StreamingQueryException naming the query, batch and step (its message
redacted: no storage_options secret, URL credentials or signed query strings).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from ..errors import IncrementsError, StreamingQueryException
from ..operators.stateless import ScanOp, WatermarkOp
from ..redaction import logger as redacting_logger
from ..storage import redact
from ..triggers import Trigger
from . import steps
from .listeners import streams
from .runtime import QueryRuntime

log = redacting_logger("increments.query")
IDLE_POLL_S = 0.05


class StreamingQuery:
    def __init__(self, rt: QueryRuntime, trigger: Trigger):
        self._rt = rt
        self.trigger = trigger
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._plan_started = 0.0
        self._last_idle_plan_start = -1.0
        self._exception: StreamingQueryException | None = None
        self._active = False
        self._recent: deque[dict[str, Any]] = deque(maxlen=100)
        self._step = ""
        self._batch: int | None = None

    # -- public API ---------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self._rt.query_id

    @property
    def run_id(self) -> str:
        return self._rt.run_id

    @property
    def name(self) -> str:
        return self._rt.name

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def last_progress(self) -> dict[str, Any] | None:
        return self._recent[-1] if self._recent else None

    @property
    def recent_progress(self) -> list[dict[str, Any]]:
        return list(self._recent)

    @property
    def runtime(self) -> QueryRuntime:
        return self._rt

    def exception(self) -> StreamingQueryException | None:
        return self._exception

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until the query stops; re-raise its failure. Returns False on timeout."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        if self._exception is not None:
            raise self._exception
        return True

    def process_all_available(self, timeout: float | None = None) -> None:
        """Block until everything available when called has been processed (or the query stopped)."""
        called = time.monotonic()
        deadline = None if timeout is None else called + timeout
        with self._cond:
            while self._active and self._last_idle_plan_start < called:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"process_all_available: query {self.name!r} still busy")
                self._cond.wait(min(left, 0.5) if left is not None else 0.5)
        if self._exception is not None:
            raise self._exception

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    # -- runner -------------------------------------------------------------------------
    def start(self) -> "StreamingQuery":
        self._active = True
        streams.active[self.id] = self
        self._rt.emit("on_query_started", {"id": self.id, "run_id": self.run_id, "name": self.name})
        self._thread = threading.Thread(target=self._run, name=f"increments-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        rt = self._rt
        try:
            # the state's local caches open while the start-up below waits on the broker, listing, fsyncs
            rt.state.warm([op.operator_id for op in rt.plan.stateful_ops])
            for i, src in enumerate(rt.sources):   # this runner runs the next batches in this process
                src.enable_read_ahead(rt.plan.scan_columns.get(i))
                prepare = _prepare_hook(rt, i)
                if prepare is not None:
                    src.prepare_rows_with(prepare)
            if self.trigger.kind == "available_now":
                for src in rt.sources:
                    src.prepare_available_now()
            while not self._stop.is_set():
                started = time.monotonic()
                self._plan_started = started
                progress = self._one_batch(limited=self.trigger.kind != "once")
                if progress is not None:
                    self._recent.append(progress)
                    rt.emit("on_query_progress", progress)
                    self._signal(idle=False)
                if self.trigger.kind == "once" or (self.trigger.kind == "available_now" and progress is None):
                    break
                if progress is None:
                    self._signal(idle=True)
                    self._wait(max(IDLE_POLL_S, self.trigger.interval_ms / 1000 - (time.monotonic() - started)))
                elif self.trigger.interval_ms:
                    self._wait(self.trigger.interval_ms / 1000 - (time.monotonic() - started))
        except BaseException as e:  # noqa: BLE001 - reported through exception()/await_termination
            msg = f"{rt.where(self._batch, self._step)} terminated with exception: {redact(str(e))}"
            if not isinstance(e, IncrementsError):
                msg += f" ({type(e).__name__})"
            log.error("%s", msg)
            self._exception = StreamingQueryException(msg, e)
            self._exception.__cause__ = e
        finally:
            self._active = False
            streams.active.pop(self.id, None)
            try:
                rt.close()
            finally:
                rt.emit("on_query_terminated", {"id": self.id, "run_id": self.run_id, "name": self.name,
                                                "exception": str(self._exception) if self._exception else None})
                self._signal(idle=True)

    def _one_batch(self, limited: bool) -> dict[str, Any] | None:
        rt = self._rt
        self._step, self._batch = "plan", None
        plan = steps.plan_batch(rt, limited=limited)
        if plan is None:
            self._step = ""
            return None
        self._batch = plan.batch_id
        for name, fn in (("read", steps.read_batch), ("process", steps.process_batch), ("write", steps.write_batch)):
            self._step = name
            fn(rt, plan)
        self._step = "commit"
        _, progress = steps.commit_batch(rt, plan)
        self._step = ""
        return progress

    def _signal(self, idle: bool) -> None:
        with self._cond:
            if idle:
                self._last_idle_plan_start = self._plan_started
            self._cond.notify_all()

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._stop.wait(seconds)

    def __repr__(self) -> str:
        return f"StreamingQuery(name={self.name!r}, id={self.id}, active={self.is_active})"


def _prepare_hook(rt: QueryRuntime, index: int) -> Any:
    """The work on source `index`'s rows that can run while they are read ahead: the partials of an
    operator with `prepare` that receives the scan's table object unchanged (through watermark
    nodes only), e.g. scan -> with_watermark -> group_by(window, key).count(). None otherwise."""
    nparts = rt.state.partitions
    for op in rt.plan.root.walk():
        if not hasattr(op, "prepare") or len(op.children) != 1:
            continue
        child = op.children[0]
        while isinstance(child, WatermarkOp):
            child = child.children[0]
        if isinstance(child, ScanOp) and child.source_index == index:
            return lambda table, op=op: op.prepare(table, nparts)
    return None


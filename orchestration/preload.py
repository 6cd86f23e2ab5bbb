"""Import the engine's heavy modules in a run's process while Dagster starts the run.

Every launched batch run is a new process (Dagster's run worker, spawned by the code server):
it imports Dagster, loads the code location (which imports only what the definitions need:
no pyarrow, DuckDB, operators or checkpoint log), then writes its start events (RUN_START,
resources, log capture, STEP_START: each a PostgreSQL round trip) before the first op runs,
and the first op then imports the engine (~0.5-1 s of a batch run). `start()`, called when the
code location's definitions are built, imports those modules on a background thread in that
window, only in a process that runs ops: a multiprocessing child (Dagster's run worker and the
multiprocess executor's step processes), never the code server, webserver or daemon (they
evaluate sensors and serve the UI and need none of it). Each op calls `wait()` first, so no
module is imported by the op and the thread at once.

The thread starts after build_definitions' own imports and imports only `increments` modules
(which never import `orchestration`) and third-party libraries Dagster does not import, so it
cannot meet the main thread's imports in a cycle. INCREMENTS_PRELOAD=0 turns it off; =1 starts
it in any process (tests).
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
import threading

#: what a batch run's first op imports (plan: runtime, log, planner; later steps: operators, sinks)
MODULES = ("pyarrow", "pyarrow.compute", "pyarrow.parquet", "duckdb", "increments.execution.runtime",
           "increments.execution.steps", "increments.plan.compiler", "increments.checkpoint.identity",
           "increments.checkpoint.sql_log", "increments.checkpoint.drains", "increments.execution.staging",
           "increments.execution.sink_factory", "increments.operators")

_thread: threading.Thread | None = None
_failed: list[str] = []


def wanted() -> bool:
    """Preload in this process? INCREMENTS_PRELOAD=0/1 decides; else only in a multiprocessing child."""
    flag = os.environ.get("INCREMENTS_PRELOAD", "")
    if flag in ("0", "1"):
        return flag == "1"
    return multiprocessing.parent_process() is not None


def _run() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - the op that needs it imports it again and reports
            _failed.append(f"{name}: {type(e).__name__}: {e}")


def start() -> bool:
    """Start the background import once per process when wanted(); True if it was started now."""
    global _thread
    if _thread is not None or not wanted():
        return False
    _thread = threading.Thread(target=_run, name="increments-preload", daemon=True)
    _thread.start()
    return True


def wait() -> None:
    """Block until the background import (if any) is done; cheap once it is."""
    t = _thread
    if t is not None and t.is_alive():
        t.join()

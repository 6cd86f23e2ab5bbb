"""increments: streaming queries with the semantics of Spark Structured Streaming, in Python.

    import increments as inc
    from increments import functions as F

The package root imports nothing of the engine: every name below is loaded on first use (PEP 562
module __getattr__), so that `import increments` stays light and the modules that lie below the
engine (increments.lazy, storage, types, errors, ...) can be imported on their own, by the state
package (state/) among others, without running the engine's imports (tests/test_import_boundaries.py).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .malloc_arenas import cap_arenas

__version__ = "0.1.0"

cap_arenas()        # glibc's malloc arenas of a process that runs batches: increments/malloc_arenas.py

#: public name -> (module, attribute; None: the module itself)
_EXPORTS: dict[str, tuple[str, str | None]] = {
    "functions": ("increments.functions", None),
    "storage": ("increments.storage", None),
    "dead_letter": ("increments.sinks.dead_letter", None),
    "DataFrameReader": ("increments.api.reader", "DataFrameReader"),
    "DataStreamReader": ("increments.api.reader", "DataStreamReader"),
    "StreamingQueryListener": ("increments.execution.listeners", "StreamingQueryListener"),
    "StreamingQueryManager": ("increments.execution.listeners", "StreamingQueryManager"),
    "streams": ("increments.execution.listeners", "streams"),
    "memory_batches": ("increments.sinks.memory", "memory_batches"),
    "memory_table": ("increments.sinks.memory", "memory_table"),
    "read_state": ("increments.state_access", "read_state"),
    "state_view": ("increments.state_access", "state_view"),
    **{name: ("increments.errors", name) for name in (
        "AnalysisException", "ArithmeticOverflowError", "ConcurrentRunError", "DataLossError", "DivideByZeroError",
        "ExpectationFailed", "IncompatibleCheckpointError", "IncrementsError", "MalformedInputError", "StreamingQueryException")},
    **{name: ("increments.stateful_processor", name) for name in (
        "ExpiredTimerInfo", "ListState", "MapState", "StatefulProcessor", "StatefulProcessorHandle", "TimerValues",
        "ValueState")},
}


def _readers() -> None:
    """`read_stream` (alias `readStream`) and `read`: one reader of each kind per process."""
    from .api.reader import DataFrameReader, DataStreamReader  # noqa: PLC0415 - the root loads the API on first use
    g = globals()
    g["read_stream"] = g["readStream"] = DataStreamReader()
    g["read"] = DataFrameReader()


def __getattr__(name: str) -> Any:
    if name in ("read_stream", "readStream", "read"):
        _readers()
        return globals()[name]
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
    else:       # a submodule (inc.errors, inc.types, ...), as an eager package root made them attributes
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:   # the names __getattr__ gives, for type checkers and editors
    from . import functions, storage  # noqa: F401
    from .api.reader import DataFrameReader, DataStreamReader
    from .errors import (AnalysisException, ArithmeticOverflowError, ConcurrentRunError, DataLossError,  # noqa: F401
                         DivideByZeroError, ExpectationFailed, IncompatibleCheckpointError, IncrementsError, MalformedInputError,
                         StreamingQueryException)
    from .execution.listeners import StreamingQueryListener, StreamingQueryManager, streams  # noqa: F401
    from .sinks import dead_letter  # noqa: F401
    from .sinks.memory import memory_batches, memory_table  # noqa: F401
    from .state_access import read_state, state_view  # noqa: F401
    from .stateful_processor import (ExpiredTimerInfo, ListState, MapState, StatefulProcessor,  # noqa: F401
                                     StatefulProcessorHandle, TimerValues, ValueState)
    read_stream: DataStreamReader
    readStream: DataStreamReader
    read: DataFrameReader

__all__ = ["functions", "read_stream", "read", "streams", "read_state", "state_view", "memory_table",
           "memory_batches", "StreamingQueryListener", "AnalysisException", "ConcurrentRunError", "DataLossError",
           "ExpectationFailed", "ArithmeticOverflowError", "DivideByZeroError",
           "IncompatibleCheckpointError", "IncrementsError", "MalformedInputError", "StreamingQueryException"]

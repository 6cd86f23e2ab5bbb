"""increments: streaming queries with the semantics of Spark Structured Streaming, in Python.

    import increments as inc
    from increments import functions as F
"""
from __future__ import annotations

from . import functions
from .api.reader import DataFrameReader, DataStreamReader
from .errors import (AnalysisException, ConcurrentRunError, DataLossError, IncompatibleCheckpointError,
                     IncrementsError, MalformedInputError, StreamingQueryException)
from .execution.listeners import StreamingQueryListener, StreamingQueryManager
from .sinks.memory import memory_batches, memory_table

__version__ = "0.1.0"

read_stream = DataStreamReader()
readStream = read_stream
read = DataFrameReader()
streams = StreamingQueryManager()


def read_state(checkpoint: str, operator: str | int | None = None, version: int | None = None, **kw):
    """An operator's state as an Arrow table of keys and values (see state/reader.py)."""
    from state.reader import read_state as _read_state
    return _read_state(checkpoint, str(operator) if operator is not None else "0", version=version, **kw)


def state_view(con, name: str, checkpoint: str, operator: str | int = "0", version: int | None = None):
    """Register an operator's state as a DuckDB view named `name` on connection `con`."""
    from state.reader import state_view as _state_view
    return _state_view(con, name, checkpoint, str(operator), version=version)


def __getattr__(name: str):
    if name == "dead_letter":
        from .sinks import dead_letter
        return dead_letter
    raise AttributeError(name)


__all__ = ["functions", "read_stream", "read", "streams", "read_state", "state_view", "memory_table",
           "memory_batches", "StreamingQueryListener", "AnalysisException", "ConcurrentRunError", "DataLossError",
           "IncompatibleCheckpointError", "IncrementsError", "MalformedInputError", "StreamingQueryException"]
from .stateful_processor import (ExpiredTimerInfo, ListState, MapState, StatefulProcessor,  # noqa: E402
                                 StatefulProcessorHandle, TimerValues, ValueState)

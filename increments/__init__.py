"""increments: streaming queries with the semantics of Spark Structured Streaming, in Python.

    import increments as inc
    from increments import functions as F
"""
from __future__ import annotations

from . import functions, storage
from .api.reader import DataFrameReader, DataStreamReader
from .errors import (AnalysisException, ArithmeticOverflowError, ConcurrentRunError, DataLossError, ExpectationFailed,
                     IncompatibleCheckpointError, IncrementsError, MalformedInputError, StreamingQueryException)
from .execution.listeners import StreamingQueryListener, StreamingQueryManager, streams
from .sinks import dead_letter
from .sinks.memory import memory_batches, memory_table

__version__ = "0.1.0"

read_stream = DataStreamReader()
readStream = read_stream
read = DataFrameReader()


def read_state(checkpoint, operator: str | int | None = None, version: int | None = None, *,
               log_url: str | None = None, storage_options: dict | None = None, **kw):
    """An operator's state as an Arrow table of keys and values (see state/reader.py).

    `checkpoint` is a path or URL (s3://, gs://, az://, ...; opened with `storage_options`).
    `version` defaults to the last committed batch. The files of a version are the ones its commit
    row names (commits[version].extra["state_tokens"], from the log at `log_url`, else
    INCREMENTS_LOG_URL, else the SQLite log of a local checkpoint), never a losing runner's."""
    # not at module level: state imports increments (storage, types), so `import state` first
    # runs this module while state.reader is still loading
    from state.reader import read_state as _read_state
    op = str(operator) if operator is not None else "0"
    loc, version, tokens = _state_tokens(checkpoint, op, version, log_url, storage_options)
    return _read_state(loc, op, version=version, tokens=tokens, storage_options=storage_options, **kw)


def state_view(con, name: str, checkpoint, operator: str | int = "0", version: int | None = None, *,
               log_url: str | None = None, storage_options: dict | None = None):
    """Register an operator's state as a DuckDB view named `name` on connection `con` (see read_state);
    returns the table (keep a reference while the view is in use)."""
    table = read_state(checkpoint, operator, version, log_url=log_url, storage_options=storage_options)
    con.register(name, table)
    return table


def _state_tokens(checkpoint, operator: str, version: int | None, log_url: str | None,
                  storage_options: dict | None):
    """(Location, version, {partition: token} or None) of an operator's state from the query's log."""
    import os

    from .checkpoint.log import open_log  # not at module level: the SQL log loads SQLAlchemy
    from .checkpoint.metadata import read_metadata
    loc = storage.location(checkpoint, storage_options)
    meta = read_metadata(loc)
    if meta is None:
        return loc, version, None
    if loc.is_local and not (log_url or os.environ.get("INCREMENTS_LOG_URL")) \
            and not os.path.exists(loc.local_path("log.sqlite")):
        return loc, version, None
    log = open_log(log_url, loc, meta["id"], meta.get("name") or meta["id"])
    commit = log.latest_commit() if version is None else log.get_commit(version)
    if commit is None:
        return loc, version, None
    tokens = (commit.extra.get("state_tokens") or {}).get(operator)
    return loc, commit.batch_id, ({i: t for i, t in enumerate(tokens)} if tokens else None)


__all__ = ["functions", "read_stream", "read", "streams", "read_state", "state_view", "memory_table",
           "memory_batches", "StreamingQueryListener", "AnalysisException", "ConcurrentRunError", "DataLossError",
           "ExpectationFailed", "ArithmeticOverflowError",
           "IncompatibleCheckpointError", "IncrementsError", "MalformedInputError", "StreamingQueryException"]
from .stateful_processor import (ExpiredTimerInfo, ListState, MapState, StatefulProcessor,  # noqa: E402
                                 StatefulProcessorHandle, TimerValues, ValueState)

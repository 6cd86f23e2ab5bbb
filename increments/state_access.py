"""`inc.read_state` / `inc.state_view`: an operator's state as of a committed batch, read through
the query's log (which names the files of each version) and the state reader (state/reader.py).
Loaded on first use of either (increments/__init__.py)."""
from __future__ import annotations

import os

from state.reader import read_state as _read_state

from . import storage
from .checkpoint.log import open_log
from .checkpoint.metadata import read_metadata


def read_state(checkpoint, operator: str | int | None = None, version: int | None = None, *,
               log_url: str | None = None, storage_options: dict | None = None, **kw):
    """An operator's state as an Arrow table of keys and values (see state/reader.py).

    `checkpoint` is a path or URL (s3://, gs://, az://, ...; opened with `storage_options`).
    `version` defaults to the last committed batch. The files of a version are the ones its commit
    row names (commits[version].extra["state_tokens"], from the log at `log_url`, else
    INCREMENTS_LOG_URL, else the SQLite log of a local checkpoint), never a losing runner's."""
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

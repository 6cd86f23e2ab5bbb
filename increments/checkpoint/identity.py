"""A checkpoint and its log stay together: which log a checkpoint was written with, and the checks
made at every start before anything is read or written.

At the first start the log gets an identity row for the query (table `increments_queries`: query
id, a new log id, the checkpoint's fixed conf) and the checkpoint gets `log.json`: the log id and
where the log was, without secrets (dialect, host, port, database). Later starts refuse:
* a log that does not hold the query's identity row, or holds another log id: a log_url pointing
  at another (empty) database, or a lost embedded log.sqlite. Such a log would start again at
  batch 0 and the sink would skip or duplicate batches. Move a log with `increments migrate-log`.
* a checkpoint whose metadata.json (the query id) is gone while the checkpoint holds the query's
  files: a new query id would make the sink write every batch again. The id is restored only when
  the log (its identity row, named by log.json) and the sink (which holds that query id's writes)
  agree on it.
* a checkpoint with no log.json whose log holds nothing of the query (no identity row, no offsets)
  while the checkpoint shows the query ran: seen-files entries (sources/), state (state/), staged
  step results (staging/), or a sink holding the query id's writes (a Delta app transaction, a
  PostgreSQL marker row, a Parquet manifest). That is a lost log together with its log.json, or a
  checkpoint written before log.json existed opened on a new, empty log_url: it too would start
  again at batch 0 while the sink skips the batch ids it holds (the new files' rows lost).
* a lost conf.json: the conf (plan fingerprint, state partitions and provider) is compared with the
  copy in the identity row, else with what the log's offsets recorded, and conf.json restored.
Checkpoints and logs written before these checks get their identity at their next start.
"""
from __future__ import annotations

import errno
import json
import time
import uuid
from typing import Any, Callable

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ..errors import CheckpointAccessError, IncompatibleCheckpointError, IncrementsError
from ..redaction import logger as redacting_logger
from ..storage import Location
from .log import BatchLog, resolve_log_url
from .metadata import CheckpointMetadata, _read_conf, _read_json_file, check_conf, create_metadata, read_metadata
from .sql_log import create_table, sqlite_failure

logger = redacting_logger("increments.checkpoint")
_METADATA = sa.MetaData()
QUERIES = sa.Table(
    "increments_queries", _METADATA,
    sa.Column("query_id", sa.String(64), primary_key=True),
    sa.Column("log_id", sa.String(64), nullable=False),
    sa.Column("body", sa.Text, nullable=False),          # JSON: name, checkpoint (redacted), conf
    sa.Column("created_at", sa.BigInteger, nullable=False),
)
LOG_FILE = "log.json"


def describe_url(url: str) -> dict[str, Any]:
    """Where a log is, without secrets: dialect, host, port, database (an SQLite file's path)."""
    u = sa.engine.make_url(url)
    return {"dialect": u.get_backend_name(), "host": u.host, "port": u.port, "database": u.database}


def show(where: dict[str, Any]) -> str:
    if where.get("dialect") == "sqlite":
        return f"sqlite file {where.get('database')}"
    host = where.get("host") or "localhost"
    port = f":{where['port']}" if where.get("port") else ""
    return f"{where.get('dialect')} database {where.get('database')!r} on {host}{port}"


class Identities:
    """The identity rows of a log (one per query id)."""

    def __init__(self, engine: sa.Engine):
        self.engine = engine
        create_table(engine, QUERIES)

    def get(self, query_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(QUERIES).where(QUERIES.c.query_id == query_id)).first()
        if row is None:
            return None
        return {**json.loads(row.body), "query_id": row.query_id, "log_id": row.log_id, "created_at": row.created_at}

    def create(self, query_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Insert the identity row (a new log id); one that exists (a concurrent start) is returned."""
        try:
            with self.engine.begin() as c:
                c.execute(QUERIES.insert().values(query_id=query_id, log_id=uuid.uuid4().hex,
                                                  body=json.dumps(body, sort_keys=True),
                                                  created_at=int(time.time() * 1000)))
        except IntegrityError:
            pass
        got = self.get(query_id)
        assert got is not None
        return got

    def mark_moved(self, query_id: str, to: dict[str, Any]) -> None:
        """The query's log was copied elsewhere (increments migrate-log): this one must not be used."""
        cur = self.get(query_id) or {}
        body = {k: v for k, v in cur.items() if k not in ("query_id", "log_id", "created_at")}
        body["moved_to"] = to
        with self.engine.begin() as c:
            c.execute(QUERIES.update().where(QUERIES.c.query_id == query_id)
                      .values(log_id="moved:" + str(cur.get("log_id")), body=json.dumps(body, sort_keys=True)))

    def set_conf(self, query_id: str, conf: dict[str, Any]) -> None:
        cur = self.get(query_id) or {}
        body = {k: v for k, v in cur.items() if k not in ("query_id", "log_id", "created_at")}
        body["conf"] = conf
        with self.engine.begin() as c:
            c.execute(QUERIES.update().where(QUERIES.c.query_id == query_id).values(body=json.dumps(body, sort_keys=True)))


def read_log_file(loc: Location) -> dict[str, Any] | None:
    try:
        return _read_json_file(loc, LOG_FILE, "which log the checkpoint was written with")
    except FileNotFoundError:
        return None


def _traces(loc: Location) -> list[str]:
    """What of a query's checkpoint is there besides metadata.json."""
    found = [n for n in ("conf.json", LOG_FILE) if loc.exists(n)]
    return found + _ran(loc)


def _ran(loc: Location) -> list[str]:
    """What in the checkpoint only a query that planned a batch writes: sources/, state/, staging/."""
    found = []
    for d in ("sources", "state", "staging"):
        objs, dirs = loc.list_dir(d)
        if objs or dirs:
            found.append(d + "/")
    return found


def _refuse_lost_log(loc: Location, who: str, qid: str, url: str, sink_agrees: Callable[[str], bool | None]) -> None:
    """No log.json and a log without the query's identity row or offsets: refuse when the
    checkpoint or the sink shows the query ran (module doc)."""
    found = [loc.join(d) for d in _ran(loc)]
    if sink_agrees(qid):
        found.append(f"the sink's output of query id {qid}")
    if not found:
        return
    raise IncompatibleCheckpointError(
        f"query {who!r}: the checkpoint at {loc.url} shows the query ran ({', '.join(found)}), but the "
        f"offsets/commits log this start opened ({show(describe_url(url))}) holds no history of query id {qid}, "
        f"and the checkpoint has no {LOG_FILE} naming the log it was written with (a lost log.sqlite together "
        f"with {LOG_FILE}, or a log_url pointing at a new, empty database). Running on it would start again at "
        f"batch 0: the sink would skip the batch ids it holds and the rows of the new input would be lost. Point "
        f"the log_url option (or INCREMENTS_LOG_URL) at the log the query ran with; to move a log, copy it first "
        f"with `increments migrate-log {loc.url} --from OLD_URL --to NEW_URL`. If the log is lost, this "
        f"checkpoint cannot continue: start the query on a new checkpoint location (and a sink that does not hold "
        f"its output) and backfill it from the sources.")


def _refuse_log(loc: Location, query: str, recorded: dict[str, Any], url: str, why: str) -> None:
    raise IncompatibleCheckpointError(
        f"query {query!r}: the checkpoint at {loc.url} was written with the offsets/commits log in "
        f"{show(recorded)} (log id {recorded.get('log_id')}), but the log this start opened ({show(describe_url(url))}) "
        f"{why}. Running on it would start again at batch 0: the sink would skip the batches it holds and lose or "
        f"duplicate rows. Point the log_url option (or INCREMENTS_LOG_URL) back at the original log; to move a log, "
        f"copy it first with `increments migrate-log {loc.url} --from OLD_URL --to NEW_URL`. If the log is lost, "
        f"this checkpoint cannot continue: start the query on a new checkpoint location (and a sink that does not "
        f"hold its output) and backfill it from the sources.")


def _recover_metadata(loc: Location, name: str | None, url: str, found: list[str],
                      sink_agrees: Callable[[str], bool | None]) -> dict[str, Any]:
    """metadata.json is gone from a used checkpoint: restore the query id when log and sink agree."""
    recorded = read_log_file(loc) or {}
    qid = recorded.get("query_id")
    why = ""
    if qid:
        ident = Identities(BatchLog(url, qid, name or qid).engine).get(qid)
        if ident is None or ident.get("log_id") != recorded.get("log_id"):
            why = f"the log ({show(describe_url(url))}) holds no history of query id {qid}, which {LOG_FILE} names"
        else:
            held = sink_agrees(qid)
            if held:
                logger.warning("query %r: %s was missing; restored query id %s, on which the log and the sink agree",
                               name, loc.join("metadata.json"), qid)
                return create_metadata(loc, name, qid, {"restored_at_ms": int(time.time() * 1000)})
            why = (f"the log names query id {qid}, but the sink " +
                   ("holds no output of that query id" if held is False else "cannot tell which query id wrote it"))
    else:
        why = f"the checkpoint has no {LOG_FILE} naming the query id"
    hint = f' with {{"id": "{qid}"}} if that is the query id' if qid else ""
    raise IncompatibleCheckpointError(
        f"query {name!r}: {loc.join('metadata.json')} (the query id) is missing, but the checkpoint holds "
        f"{', '.join(found)} of a query that ran; {why}. A new query id would make the sink write every batch "
        f"again. Restore metadata.json from a backup of the checkpoint (or write it{hint}), or start the query on "
        "a new checkpoint location.")


def open_checkpoint(loc: Location, name: str | None, conf: dict[str, Any], log_url: str | None,
                    sink_agrees: Callable[[str], bool | None] = lambda qid: None) -> tuple[CheckpointMetadata, BatchLog]:
    """The checkpoint's metadata and its log, after the checks of the module doc (_open); a
    checkpoint that cannot be read or written fails naming it (CheckpointAccessError)."""
    try:
        return _open(loc, name, conf, log_url, sink_agrees)
    except IncrementsError:
        raise
    except sa.exc.DBAPIError as e:
        failure = sqlite_failure(resolve_log_url(log_url, loc), e)
        if failure is None:
            raise
        raise type(failure)(failure.errno, f"query {name!r}: {failure.strerror}") from e
    except OSError as e:
        what = f"{e.strerror or e}" + (f" ({e.filename})" if getattr(e, "filename", None) else "")
        if e.errno == errno.ENOSPC:
            raise CheckpointAccessError(
                errno.ENOSPC, f"query {name!r}: the checkpoint location {loc.url} cannot be written: the disk is full "
                              f"(ENOSPC: {what}). Free space on that disk, or start the query on a checkpoint "
                              "location on another disk.") from e
        from ..storage.remote import no_such_bucket  # noqa: PLC0415 - one branch: obstore (increments.storage.remote) only for an object-store checkpoint
        missing = no_such_bucket(str(e))
        if missing:          # the checkpoint's bucket or the sink's (its table is looked up here too)
            raise CheckpointAccessError(f"query {name!r}: {missing}") from e
        raise CheckpointAccessError(
            f"query {name!r}: the checkpoint location {loc.url} cannot be created, read or written: {what}. Use a "
            "location this process can write (a directory it may create, or a bucket prefix its credentials may "
            "write), or fix its permissions.") from e


def _open(loc: Location, name: str | None, conf: dict[str, Any], log_url: str | None,
          sink_agrees: Callable[[str], bool | None]) -> tuple[CheckpointMetadata, BatchLog]:
    """The checkpoint's metadata and its log, after the checks of the module doc.

        meta = metadata.json, or (missing but the checkpoint is used) the id log and sink agree on, or refuse
        log = the log at log_url; identity = its row for the query id; recorded = log.json
        recorded and (no identity or another log id) -> refuse
        no recorded, no identity, no offsets, and sources/ state/ staging/ or the sink's writes -> refuse
        conf.json missing -> compare with identity's conf (else the last offsets' conf), restore it
        check the conf (CheckpointMetadata.open); create identity and log.json when missing
    """
    url = resolve_log_url(log_url, loc)
    meta = read_metadata(loc)
    if meta is None:
        found = _traces(loc)
        # a first starter racing this one writes metadata.json before anything else: read it again
        meta = read_metadata(loc) if found else None
        if meta is None:
            meta = _recover_metadata(loc, name, url, found, sink_agrees) if found else create_metadata(loc, name)
    qid = meta["id"]
    who = name or qid
    log = BatchLog(url, qid, who)
    ids = Identities(log.engine)
    ident = ids.get(qid)
    recorded = read_log_file(loc)
    if recorded is not None:
        if ident is None:
            _refuse_log(loc, who, recorded, url, f"holds no history of query id {qid}")
        elif ident.get("moved_to"):
            _refuse_log(loc, who, recorded, url, f"was copied to {show(ident['moved_to'])} by increments migrate-log "
                                                 "and is no longer this query's log")
        elif ident["log_id"] != recorded.get("log_id"):
            _refuse_log(loc, who, recorded, url, f"is another log (log id {ident['log_id']})")
    elif ident is None and log.latest_offsets() is None:
        _refuse_lost_log(loc, who, qid, url, sink_agrees)
    fixed = _read_conf(loc)
    if not fixed:
        _restore_conf(loc, who, ident, log, conf)
    cm = CheckpointMetadata.open(loc, name, conf)
    if ident is None:
        ident = ids.create(qid, {"name": name, "checkpoint": loc.url, "conf": cm.conf})
    elif ident.get("conf") != cm.conf:
        ids.set_conf(qid, cm.conf)
    if recorded is None:
        try:
            loc.write_json(LOG_FILE, {"log_id": ident["log_id"], "query_id": qid, **describe_url(url)},
                           create_only=True)
        except FileExistsError:
            pass
    return cm, log


def _restore_conf(loc: Location, who: str, ident: dict[str, Any] | None, log: BatchLog,
                  conf: dict[str, Any]) -> None:
    """conf.json is missing: put back the copy the log's identity row keeps (CheckpointMetadata.open
    then compares this start's conf with it); without one, compare the partitions and provider the
    last offsets entry recorded."""
    if ident is not None and ident.get("conf"):
        if log.latest_offsets() is not None:
            logger.warning("query %r: %s was missing; restored from the log", who, loc.join("conf.json"))
        try:
            loc.write_json("conf.json", ident["conf"], create_only=True)
        except FileExistsError:
            pass
        return
    last = log.latest_offsets()
    if last is not None and last.conf:
        check_conf(loc, who, {k: v for k, v in last.conf.items() if k in ("state_partitions", "state_store")},
                   json.loads(json.dumps(conf)))

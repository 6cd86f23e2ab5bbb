"""The `increments` command.

    increments history <query> [--checkpoint PATH|URL] [--log-url URL] [--limit N]
                               [--storage-option KEY=VALUE ...]

prints a query's batch history from its offsets/commits log as a terminal table: batch id,
committed at, offsets range per source, rows in/out, watermark, state versions, sink version,
durations, attempts, what each source read (file names, Kafka topic/partition ranges, Delta
versions) and the upstream batches of other queries it read (a Delta table or parquet sink
written by an increments query); then the query's AvailableNow drains. <query> is a checkpoint directory or
URL (s3://, gs://, az://, file://; credentials from the cloud's environment or --storage-option),
or a query name registered in the module $INCREMENTS_QUERIES (default examples.queries), whose
writer gives the checkpoint, its storage_options and log_url. The log URL: --log-url, else the
query's log_url option, else $INCREMENTS_LOG_URL, else the SQLite file in a local checkpoint.
Nothing printed carries a secret: locations are shown redacted, the log URL is never shown.

    increments check <module:function | registered name> [--checkpoint PATH|URL] [--log-url URL]
                     [--storage-option KEY=VALUE ...]

rehearses a restart: compiles the changed query (running nothing, writing nothing) and compares it
with its checkpoint; prints whether a restart is safe and, if not, each change and the rule of
Spark's it breaks. Exit 0 safe, 1 not (increments/lifecycle/check.py).

    increments migrate <module:function | registered name> --to <new checkpoint>
                       [--backfill earliest | --backfill-from-sink [--no-sink-check]]

runs the changed query on the new checkpoint as AvailableNow drains from the earliest offsets (or,
with --backfill-from-sink, first from the old query's Delta table under the old query's offsets,
then from the source where the old query stopped: increments/lifecycle/from_sink.py) into a
staging Delta table, repeats until its committed source offsets reach the old query's last committed
offsets, then switches the sink over in one Delta commit and retires the old checkpoint
(increments/lifecycle/migrate.py). Exit 0 switched over; 1 refused or failed, nothing switched.

    increments migrate-log <checkpoint> --to URL [--from URL] [--storage-option KEY=VALUE ...]

copies a query's offsets/commits log (offsets, commits, drains and the log's identity row of the
checkpoint's query id) into the log at --to (another database, e.g. from the embedded SQLite file to
PostgreSQL), then records the new log in the checkpoint's log.json. Run it while the query is
stopped, then restart the query with the log_url option set to the new URL. --from defaults to the
log the checkpoint uses without a log_url option ($INCREMENTS_LOG_URL, else its log.sqlite). A
target that already holds rows of the query is refused.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import sys
from typing import Any

from . import storage
from .checkpoint.drains import DRAINS, DrainLog
from .checkpoint.identity import LOG_FILE, QUERIES, Identities, describe_url, read_log_file, show
from .checkpoint.log import BatchLog, open_log, resolve_log_url
from .checkpoint.metadata import read_metadata
from .errors import IncrementsError
from .options import writer_options


def _fmt_ts(ms: int | None) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _compact(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), default=str)


def _resolve(query: str, checkpoint: str | None, log_url: str | None,
             storage_options: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    if checkpoint:
        return checkpoint, log_url, storage_options
    if os.path.isdir(query) or storage.scheme_of(query):
        return query, log_url, storage_options
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())   # registered queries live in the project (as in workspace.yaml)
    module = os.environ.get("INCREMENTS_QUERIES", "examples.queries")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise SystemExit(
            f"increments: {query!r} is not a checkpoint directory, and the registered queries cannot be looked up: "
            f"the module {module!r} does not import here ({e}). Run the command from the project directory, or "
            "set INCREMENTS_QUERIES to your queries' module (and PYTHONPATH so that it imports), or pass the "
            "checkpoint itself: `increments history <checkpoint path or URL> --log-url URL`.") from None
    fns = getattr(mod, "QUERIES", None) or [v for v in vars(mod).values()
                                            if callable(v) and hasattr(v, "__increments_query__")]
    for fn in fns:
        fn = fn[0] if isinstance(fn, tuple) else fn
        s = fn().settings
        if s.query_name == query:
            o = writer_options(s, required=False)
            return (s.checkpoint or o["checkpoint_location"], log_url or o["log_url"],
                    {**(o["storage_options"] or {}), **storage_options})
    raise SystemExit(f"increments history: no checkpoint directory and no registered query named {query!r} in "
                     f"{mod.__name__}; pass --checkpoint PATH")


def history_rows(checkpoint: Any, log_url: str | None = None, limit: int = 50,
                 storage_options: dict[str, Any] | None = None) -> tuple[str, list[dict[str, Any]], list]:
    """(query name, one dict per batch, drains) from the log of the query at `checkpoint` (a path,
    URL or Location)."""
    loc = storage.location(checkpoint, storage_options)
    meta = read_metadata(loc)
    if meta is None:
        raise SystemExit(f"increments history: {loc.url} is not a query checkpoint (no metadata.json)")
    log = open_log(log_url, loc, meta["id"], meta.get("name") or meta["id"])
    rows = []
    for off, com in log.history(limit):
        ranges = "; ".join(f"{k}: {_compact(off.start[k])}->{_compact(off.end.get(k))}"
                           for k in sorted(off.start, key=int))
        d = com.durations_ms if com else {}
        rows.append({
            "batch": off.batch_id, "committed_at": _fmt_ts(com.committed_at_ms) if com else "(uncommitted)",
            "offsets": ranges, "rows_in": com.num_input_rows if com else "-",
            "rows_out": com.num_output_rows if com else "-", "watermark": _fmt_ts(off.watermark_ms),
            "state_versions": _compact(com.state_versions) if com and com.state_versions else "-",
            "sink_version": _compact(com.sink_version) if com and com.sink_version is not None else "-",
            "duration_ms": d.get("trigger_execution") or sum(v for k, v in d.items() if k != "trigger_execution") if com else "-",
            "durations": " ".join(f"{k}={v}" for k, v in sorted(d.items()) if k != "trigger_execution") or "-",
            "attempt": off.attempt,
            **_lineage_cells(com),
        })
    drains = DrainLog(log.engine, meta["id"]).recent(10)
    return log.query_name, rows, drains


def _lineage_cells(com: Any) -> dict[str, str]:
    """`read`: what each source's batch read (file names, Kafka ranges, Delta versions);
    `upstream`: the batches of other queries it read (increments/execution/lineage.py)."""
    from .execution.lineage import describe, upstream_of, upstream_text  # noqa: PLC0415 - increments.execution.lineage: only the command that needs it loads it
    srcs = ((com.extra or {}).get("sources") or []) if com else []
    lins = [s.get("lineage") for s in srcs]
    read = "; ".join(f"{i}: {describe(x)}" for i, x in enumerate(lins) if x) or "-"
    return {"read": read[:120], "upstream": upstream_text(upstream_of(srcs))[:80]}


def table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no batches)"
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    line = "+-" + "-+-".join("-" * width[c] for c in cols) + "-+"
    out = [line, "| " + " | ".join(c.ljust(width[c]) for c in cols) + " |", line]
    out += ["| " + " | ".join(str(r[c]).ljust(width[c]) for c in cols) + " |" for r in rows]
    out.append(line)
    return "\n".join(out)


def _storage_options(pairs: list[str] | None) -> dict[str, str]:
    out = {}
    for p in pairs or []:
        k, sep, v = p.partition("=")
        if not sep:
            raise SystemExit(f"increments history: --storage-option wants KEY=VALUE, got {k!r}")
        out[k.strip()] = v
    return out


def cmd_history(args: argparse.Namespace) -> int:
    checkpoint, log_url, opts = _resolve(args.query, args.checkpoint, args.log_url,
                                         _storage_options(args.storage_option))
    storage.remember_secrets(opts)
    try:
        loc = storage.location(checkpoint, opts)
        name, rows, drains = history_rows(loc, log_url, args.limit)
    except IncrementsError as e:
        raise SystemExit(f"increments history: {storage.redact(str(e))}") from None
    print(f"query {name} ({loc.url}): last {len(rows)} batches")
    print(table(rows))
    if drains:
        print("AvailableNow drains:")
        print(table([{"drain": d.drain_id, "state": d.state, "started": _fmt_ts(d.created_at),
                      "finished": _fmt_ts(d.finished_at), "batches": d.batches,
                      "last_batch": d.last_batch_id if d.last_batch_id is not None else "-",
                      "targets": _compact(d.targets)[:60]} for d in drains]))
    return 0


def migrate_log(checkpoint: Any, to_url: str, from_url: str | None = None,
                storage_options: dict[str, Any] | None = None) -> dict[str, int]:
    """Copy the log rows of the checkpoint's query from `from_url` to `to_url` (see the module doc);
    returns the rows copied per table."""
    import sqlalchemy as sa  # noqa: PLC0415 - sqlalchemy: only the command that needs it loads it

    loc = storage.location(checkpoint, storage_options)
    meta = read_metadata(loc)
    if meta is None:
        raise SystemExit(f"increments migrate-log: {loc.url} is not a query checkpoint (no metadata.json)")
    qid = meta["id"]
    src = BatchLog(resolve_log_url(from_url, loc), qid)
    dst = BatchLog(resolve_log_url(to_url, loc), qid)
    Identities(src.engine), Identities(dst.engine)
    DRAINS.create(src.engine, checkfirst=True)
    DRAINS.create(dst.engine, checkfirst=True)
    tables = [src.offsets.table, src.commits.table, DRAINS, QUERIES]
    recorded = read_log_file(loc)
    ident = Identities(src.engine).get(qid)
    if ident is not None and ident.get("moved_to"):
        raise SystemExit(f"increments migrate-log: this log of query id {qid} was already copied to "
                         f"{show(ident['moved_to'])}; nothing was copied")
    if recorded is not None and (ident is None or ident["log_id"] != recorded.get("log_id")):
        raise SystemExit(f"increments migrate-log: the log given as the source does not hold the history of query "
                         f"id {qid} that {loc.join(LOG_FILE)} names; pass the original log with --from")
    with dst.engine.connect() as c:
        if any(c.execute(sa.select(sa.func.count()).select_from(t).where(t.c.query_id == qid)).scalar() for t in tables):
            raise SystemExit(f"increments migrate-log: the target log already holds rows of query id {qid}; "
                             "nothing was copied")
    copied = {}
    with src.engine.connect() as r, dst.engine.begin() as w:
        for t in tables:
            rows = [dict(row._mapping) for row in r.execute(sa.select(t).where(t.c.query_id == qid))]
            if rows:
                w.execute(t.insert(), rows)
            copied[t.name] = len(rows)
    if copied.get(QUERIES.name):
        ident = Identities(dst.engine).get(qid)
        loc.write_json(LOG_FILE, {"log_id": ident["log_id"], "query_id": qid, **describe_url(dst.url)})
        Identities(src.engine).mark_moved(qid, describe_url(dst.url))   # the old log is refused from now on
    return copied


def cmd_migrate_log(args: argparse.Namespace) -> int:
    opts = _storage_options(args.storage_option)
    storage.remember_secrets(opts)
    try:
        copied = migrate_log(args.checkpoint, args.to, args.from_url, opts)
    except IncrementsError as e:
        raise SystemExit(f"increments migrate-log: {storage.redact(str(e))}") from None
    print("copied " + ", ".join(f"{n} rows of {t}" for t, n in copied.items()) +
          ". Restart the query with the option log_url set to the new log.")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 0 when the changed query may restart on its checkpoint, 1 when not (increments.lifecycle.check)."""
    from .lifecycle.check import check, load_writer  # noqa: PLC0415 - increments.lifecycle.check: only the command that needs it loads it
    writer, path = load_writer(args.query)
    opts = _storage_options(args.storage_option)
    if args.log_url:
        writer = writer.option("log_url", args.log_url)
    try:
        report = check(writer, path, args.checkpoint, opts)
    except IncrementsError as e:
        print(f"increments check: the query does not start: {storage.redact(str(e))}")
        return 1
    print(storage.redact(report.text()))
    return 0 if report.safe else 1


def cmd_migrate(args: argparse.Namespace) -> int:
    """Backfill the changed query on a new checkpoint and switch its Delta sink over
    (increments.lifecycle.migrate)."""
    from .lifecycle.check import load_writer  # noqa: PLC0415 - increments.lifecycle.check: only the command that needs it loads it
    from .lifecycle.migrate import migrate  # noqa: PLC0415 - increments.lifecycle.migrate: only the command that needs it loads it
    if args.no_sink_check and not args.backfill_from_sink:
        raise SystemExit("increments migrate: --no-sink-check goes with --backfill-from-sink")
    writer, path = load_writer(args.query)
    opts = _storage_options(args.storage_option)
    if opts:
        own = writer_options(writer.settings, required=False)["storage_options"] or {}
        writer = writer.option("storage_options", {**own, **opts})
    if args.log_url:
        writer = writer.option("log_url", args.log_url)
    try:
        res = migrate(writer, args.to, path, "from-sink" if args.backfill_from_sink else args.backfill,
                      max_rounds=args.max_rounds, sink_check=not args.no_sink_check)
    except IncrementsError as e:
        msg = storage.redact(str(e))
        raise SystemExit(msg if msg.startswith("increments migrate") else f"increments migrate: {msg}") from None
    print(f"query id {res.query_id}: from now on run the changed query with checkpoint_location("
          f"{storage.redact_url(args.to)!r}) and its sink path {storage.redact_url(res.sink_path)!r}; the old "
          f"checkpoint is retired (the backfill's staging table {storage.redact_url(res.staging_table)} may be removed)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="increments", description="increments streaming queries")
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("history", help="a query's batch history from its log")
    h.add_argument("query", help="checkpoint directory or registered query name")
    h.add_argument("--checkpoint", help="the query's checkpoint directory or URL")
    h.add_argument("--log-url", help="SQLAlchemy URL of the offsets/commits log")
    h.add_argument("--limit", type=int, default=50, help="how many recent batches (default 50)")
    h.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                   help="an object-store option (delta-rs' names), e.g. aws_endpoint_url=...; repeatable")
    m = sub.add_parser("migrate-log", help="copy a query's offsets/commits log to another database")
    m.add_argument("checkpoint", help="the query's checkpoint directory or URL")
    m.add_argument("--to", required=True, help="SQLAlchemy URL of the new log")
    m.add_argument("--from", dest="from_url", help="SQLAlchemy URL of the current log (default: the checkpoint's)")
    m.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                   help="an object-store option (delta-rs' names); repeatable")
    c = sub.add_parser("check", help="rehearse a restart: is the changed query compatible with its checkpoint?")
    c.add_argument("query", help="module:function returning the query's writer, or a registered query name")
    c.add_argument("--checkpoint", help="the checkpoint to compare with (default: the query's)")
    c.add_argument("--log-url", help="SQLAlchemy URL of the offsets/commits log (never written by check)")
    c.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                   help="an object-store option (delta-rs' names); repeatable")
    g = sub.add_parser("migrate", help="run a changed query on a new checkpoint with a backfill, then switch over")
    g.add_argument("query", help="module:function returning the changed query's writer, or a registered query name")
    g.add_argument("--to", required=True, help="the new checkpoint directory or URL")
    b = g.add_mutually_exclusive_group()
    b.add_argument("--backfill", choices=["earliest"], default="earliest",
                   help="backfill from the sources' earliest retained offsets (default)")
    b.add_argument("--backfill-from-sink", action="store_true",
                   help="backfill from the old query's Delta table (a pass-through query whose source no longer "
                        "holds the whole history), then continue from the source at the old query's offsets")
    g.add_argument("--no-sink-check", action="store_true",
                   help="with --backfill-from-sink: skip the rows check against the source's retained batches "
                        "(you assert the old query wrote its input rows unchanged)")
    g.add_argument("--max-rounds", type=int, default=50, help="AvailableNow drains before switching over at most")
    g.add_argument("--log-url", help="SQLAlchemy URL of the new checkpoint's offsets/commits log")
    g.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                   help="an object-store option (delta-rs' names); repeatable")
    from .checkpoint import repartition  # noqa: PLC0415 - increments.checkpoint.repartition: only the command that needs it loads it
    r = sub.add_parser("repartition", help="rewrite a stopped query's state into N state partitions")
    repartition.add_arguments(r)
    args = p.parse_args(argv)
    if args.cmd == "repartition":
        return repartition.run(args)
    if args.cmd == "history":
        return cmd_history(args)
    if args.cmd == "migrate-log":
        return cmd_migrate_log(args)
    if args.cmd == "check":
        return cmd_check(args)
    if args.cmd == "migrate":
        return cmd_migrate(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())

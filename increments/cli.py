"""The `increments` command.

    increments history <query> [--checkpoint PATH|URL] [--log-url URL] [--limit N]
                               [--storage-option KEY=VALUE ...]

prints a query's batch history from its offsets/commits log as a terminal table: batch id,
committed at, offsets range per source, rows in/out, watermark, state versions, sink version,
durations, attempts; then the query's AvailableNow drains. <query> is a checkpoint directory or
URL (s3://, gs://, az://, file://; credentials from the cloud's environment or --storage-option),
or a query name registered in the module $INCREMENTS_QUERIES (default examples.queries), whose
writer gives the checkpoint, its storage_options and log_url. The log URL: --log-url, else the
query's log_url option, else $INCREMENTS_LOG_URL, else the SQLite file in a local checkpoint.
Nothing printed carries a secret: locations are shown redacted, the log URL is never shown.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def _fmt_ts(ms: int | None) -> str:
    if not ms:
        return "-"
    import datetime as dt
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _compact(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), default=str)


def _resolve(query: str, checkpoint: str | None, log_url: str | None,
             storage_options: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    from . import storage
    if checkpoint:
        return checkpoint, log_url, storage_options
    if os.path.isdir(query) or storage.scheme_of(query):
        return query, log_url, storage_options
    import importlib
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
            return (s.checkpoint, log_url or s.options.get("log_url"),
                    {**(s.options.get("storage_options") or {}), **storage_options})
    raise SystemExit(f"increments history: no checkpoint directory and no registered query named {query!r} in "
                     f"{mod.__name__}; pass --checkpoint PATH")


def history_rows(checkpoint: Any, log_url: str | None = None, limit: int = 50,
                 storage_options: dict[str, Any] | None = None) -> tuple[str, list[dict[str, Any]], list]:
    """(query name, one dict per batch, drains) from the log of the query at `checkpoint` (a path,
    URL or Location)."""
    from . import storage
    from .checkpoint.log import open_log
    from .checkpoint.metadata import read_metadata
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
        })
    from .checkpoint.drains import DrainLog
    drains = DrainLog(log.engine, meta["id"]).recent(10)
    return log.query_name, rows, drains


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
    from . import storage
    from .errors import IncrementsError
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
    args = p.parse_args(argv)
    if args.cmd == "history":
        return cmd_history(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())

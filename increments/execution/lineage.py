"""What one batch read, source by source, in the terms a user matches across queries (no dagster
import here). The read step records it in each source's read metrics under "lineage", so it is
in commits[N].extra["sources"][i], in the progress report's sources[i] and in `increments history`.

    files         {"kind": "files", "files": [names relative to the listed directory, up to
                   MAX_NAMES], "num_files": n}; files written by an increments parquet sink
                   (`batch_id=<N>/part-...parquet` under a path with `_manifest/`) add "upstream"
    kafka         {"kind": "kafka", "ranges": [{"topic", "partition", "start", "end"}]}: the
                   offsets [start, end) per partition that moved
    delta         {"kind": "delta", "versions": [table versions whose files the batch read]} and,
                   when those commits were written by an increments query (the Delta sink's app
                   transaction: app id = query id, version = batch id; its commitInfo names the
                   query), "upstream"
    iceberg       {"kind": "iceberg", "snapshots": [ids of the snapshots whose files the batch
                   read]} and, for snapshots an increments Iceberg sink committed (their summary's
                   increments.query-id / batch-id / query-name), "upstream"
    other         {"kind": <class name>} with the offsets range

"upstream" is [{"query": name (or the query id when the writer did not record its name),
"query_id": id, "batch_ids": [...]}]: the batches of other queries this batch read. Lineage is
advisory: a failure to work it out never fails the batch (it is then {"kind": ..., "error": ...}).
"""
from __future__ import annotations

import json
import re
from typing import Any

MAX_NAMES = 100
_BATCH_DIR = re.compile(r"(?:^|/)batch_id=(\d+)/[^/]+$")


def source_lineage(src: Any, start: Any, end: Any) -> dict[str, Any]:
    """The lineage of one source's read of (start, end] (module doc)."""
    kind = type(src).__name__.lower()
    try:
        if not src.has_new_data(start, end):
            return {"kind": _kind(kind)}
        if hasattr(src, "files_for") and "file" in kind:
            return _files(src, start, end)
        if "kafka" in kind:
            return _kafka(start, end)
        if "delta" in kind and hasattr(src, "_files"):
            return _delta(src, start, end)
        if "iceberg" in kind and hasattr(src, "_history"):
            return _iceberg(src, start, end)
    except Exception as e:  # noqa: BLE001 - lineage is advisory, never a reason to fail a batch
        return {"kind": _kind(kind), "error": f"{type(e).__name__}: {e}"[:300]}
    return {"kind": _kind(kind)}


def _kind(cls_name: str) -> str:
    for k in ("kafka", "delta", "iceberg", "file", "memory"):
        if k in cls_name:
            return "files" if k == "file" else k
    return cls_name


def _files(src: Any, start: Any, end: Any) -> dict[str, Any]:
    names = src.files_for(start, end)
    out: dict[str, Any] = {"kind": "files", "num_files": len(names), "files": names[:MAX_NAMES]}
    if len(names) > MAX_NAMES:
        out["files_truncated"] = True
        out["last_file"] = names[-1]
    up = _parquet_sink_upstream(src, names)
    if up:
        out["upstream"] = up
    return out


def _parquet_sink_upstream(src: Any, names: list[str]) -> list[dict[str, Any]]:
    """Files of an increments parquet sink: batch_id=<N>/<part> with the sink's _manifest/ beside
    the batch directory; the manifest entry naming the part gives the query."""
    by_dir: dict[str, dict[int, set[str]]] = {}
    for n in names:
        m = _BATCH_DIR.search(n)
        if not m:
            continue
        base = n[:m.start()] if m.start() > 0 else ""
        by_dir.setdefault(base, {}).setdefault(int(m.group(1)), set()).add(n.rsplit("/", 1)[-1])
    if not by_dir:
        return []
    root = src.root()
    found: dict[str, dict[str, Any]] = {}
    for base, batches in by_dir.items():
        loc = root.child(*[p for p in base.split("/") if p]) if base else root
        try:
            entries = [o.name for o in loc.list("_manifest/")]
        except Exception:  # noqa: BLE001 - not a sink directory
            continue
        for name in entries:
            head = name.rsplit("/", 1)[-1]
            m = re.match(r"^(\d+)(?:\.([^/]+))?\.json$", head)
            if not m or int(m.group(1)) not in batches:
                continue
            try:
                body = json.loads(loc.read_bytes(name))
            except Exception:  # noqa: BLE001
                continue
            if not set(body.get("files") or []) & batches[int(m.group(1))]:
                continue
            qid = body.get("query_id") or m.group(2) or ""
            rec = found.setdefault(qid, {"query": body.get("query_name") or qid, "query_id": qid, "batch_ids": set()})
            rec["batch_ids"].add(int(m.group(1)))
    return [{**r, "batch_ids": sorted(r["batch_ids"])} for r in found.values()]


def _kafka(start: Any, end: Any) -> dict[str, Any]:
    ranges = []
    for topic in sorted(set(start or {}) | set(end or {})):
        s, e = (start or {}).get(topic, {}), (end or {}).get(topic, {})
        for p in sorted(set(s) | set(e), key=lambda x: int(x)):
            a, b = s.get(p), e.get(p)
            if a != b:
                ranges.append({"topic": topic, "partition": int(p), "start": a, "end": b})
    return {"kind": "kafka", "ranges": ranges}


def _delta(src: Any, start: dict, end: dict) -> dict[str, Any]:
    if "index" in start and "index" in end and not end.get("snapshot"):
        versions = []                       # the append source: {"version", "index"} of its data files
        for v in range(int(start["version"]), int(end["version"]) + 1):
            adds = src._commit_adds(v)
            lo = int(start["index"]) if v == int(start["version"]) else 0
            hi = int(end["index"]) if v == int(end["version"]) else len(adds)
            if hi > lo:
                versions.append(v)
    else:
        versions = _change_feed_versions(start, end)
    found: dict[str, dict[str, Any]] = {}
    loc = src.location()
    for v in versions:
        txns, info = _delta_commit_actions(loc, v)
        for app_id, batch_id in txns:
            name = info.get("increments.query") if info.get("increments.query_id", app_id) == app_id else None
            rec = found.setdefault(app_id, {"query": name or app_id, "query_id": app_id, "batch_ids": set()})
            if name:
                rec["query"] = name
            rec["batch_ids"].add(int(batch_id))
    out: dict[str, Any] = {"kind": "delta", "versions": versions}
    if found:
        out["upstream"] = [{**r, "batch_ids": sorted(r["batch_ids"])} for r in found.values()]
    return out


def _iceberg(src: Any, start: dict, end: dict) -> dict[str, Any]:
    """The snapshots of (start, end] whose added files the batch read, and the increments batches
    that committed them (sinks/iceberg.py writes the query and batch into each snapshot's summary)."""
    from ..sinks.iceberg_table import SUMMARY_BATCH, SUMMARY_QUERY, snapshot_summary  # noqa: PLC0415 - one branch: only Iceberg sinks need increments.sinks.iceberg_table; only Iceberg reads need it
    t = src.table()
    chain = src._history(t)
    first = src._position(t, chain, start)
    last = chain.index(int(end["snapshot_id"]))
    snapshots, found = [], {}
    for sid in chain[first:last + 1]:
        lo = int(start.get("index", 0)) if start.get("snapshot_id") is not None and int(start["snapshot_id"]) == sid else 0
        hi = int(end["index"]) if sid == int(end["snapshot_id"]) else len(src._added(t, sid))
        if hi <= lo:
            continue
        snapshots.append(sid)
        summ = snapshot_summary(t.metadata.snapshot_by_id(sid))
        qid, batch = summ.get(SUMMARY_QUERY), summ.get(SUMMARY_BATCH)
        if qid and batch is not None:
            rec = found.setdefault(qid, {"query": summ.get("increments.query-name") or qid, "query_id": qid,
                                         "batch_ids": set()})
            rec["batch_ids"].add(int(batch))
    out: dict[str, Any] = {"kind": "iceberg", "snapshots": snapshots}
    if found:
        out["upstream"] = [{**r, "batch_ids": sorted(r["batch_ids"])} for r in found.values()]
    return out


def _change_feed_versions(start: dict, end: dict) -> list[int]:
    """Versions a change-feed read of (start, end] covers (sources/delta_changes.py offsets:
    {"version": V} = every change of versions <= V read; a snapshot offset reads version S itself)."""
    first = int(start["version"]) + (0 if start.get("snapshot") else 1)
    last = int(end["version"])
    return list(range(first, last + 1))


def _delta_commit_actions(loc: Any, version: int) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """([(app id, version)] of the commit's txn actions, its commitInfo)."""
    text = loc.read_bytes(f"_delta_log/{version:020d}.json").decode()
    txns, info = [], {}
    for line in text.splitlines():
        if not line.strip():
            continue
        a = json.loads(line)
        if "txn" in a:
            txns.append((a["txn"]["appId"], int(a["txn"]["version"])))
        elif "commitInfo" in a:
            info = a["commitInfo"] or {}
    return txns, info


def upstream_of(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The upstream batches of a batch, merged over its sources' lineage records (as stored in
    commits[N].extra["sources"] or progress["sources"])."""
    merged: dict[str, dict[str, Any]] = {}
    for s in sources or []:
        for u in (s.get("lineage") or {}).get("upstream", []) or []:
            rec = merged.setdefault(u["query_id"], {"query": u["query"], "query_id": u["query_id"], "batch_ids": set()})
            rec["batch_ids"].update(u["batch_ids"])
    return [{**r, "batch_ids": sorted(r["batch_ids"])} for r in merged.values()]


def describe(lin: dict[str, Any] | None, limit: int = 3) -> str:
    """One short line for a table cell: 'files a.json, b.json (+3)', 'kafka t/0 [5, 9)', 'delta v3-5',
    'iceberg snapshot 4125...'."""
    if not lin:
        return "-"
    if lin.get("error"):
        return f"({lin['error'][:60]})"
    k = lin.get("kind")
    if k == "files":
        names = lin.get("files") or []
        more = lin.get("num_files", len(names)) - min(len(names), limit)
        return ("files " + ", ".join(n.rsplit("/", 1)[-1] for n in names[:limit]) + (f" (+{more})" if more > 0 else "")
                if names else "no files")
    if k == "kafka":
        r = lin.get("ranges") or []
        text = ", ".join(f"{x['topic']}/{x['partition']} [{x['start']}, {x['end']})" for x in r[:limit])
        return "kafka " + (text + (f" (+{len(r) - limit})" if len(r) > limit else "") if r else "no records")
    if k == "delta":
        return "delta " + versions_text(lin.get("versions") or [])
    if k == "iceberg":
        sids = lin.get("snapshots") or []
        return ("iceberg snapshot" + ("s " if len(sids) > 1 else " ") + ", ".join(str(x) for x in sids[:limit])
                + (f" (+{len(sids) - limit})" if len(sids) > limit else "")) if sids else "iceberg: no snapshots"
    return str(k)


def versions_text(vs: list[int]) -> str:
    """[3, 4, 5, 9] -> 'v3-5, v9'."""
    if not vs:
        return "no versions"
    parts, lo, prev = [], vs[0], vs[0]
    for v in list(vs[1:]) + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(f"v{lo}" if lo == prev else f"v{lo}-{prev}")
        if v is not None:
            lo = prev = v
    return ", ".join(parts)


def upstream_text(up: list[dict[str, Any]]) -> str:
    """'clicks_bronze 3-4; other 7'."""
    if not up:
        return "-"
    return "; ".join(f"{u['query']} {versions_text(u['batch_ids']).replace('v', '')}" for u in up)

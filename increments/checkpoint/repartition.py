"""`increments repartition <checkpoint> --partitions N`: change a stopped query's number of state
partitions (Spark cannot: its shuffle partitions are fixed by the checkpoint).

    V = the last committed batch (refused while a batch is planned but not committed)
    take the query's ownership as a runner does: insert offsets[V+1] as a fence entry (owner
        "repartition-<uuid>", conf[BARRIER_KEY] = {by, from, to, at_ms}); the insert fails when a
        runner planned V+1 first: refused, that runner is active. (A fence entry left by an
        earlier repartition is taken over by compare-and-swap.)
    for every state store of commits[V].extra["state_tokens"] (operator, and its side stores):
        read every partition at (V, its token)
        re-hash every key into 0..N-1 with the operator's own key -> partition function
            (operators/partitioning.partition_sql over the key columns the operator hashes; the
            stream-stream join hashes the key text its chunks carry in __k; apply_changes its keys)
        write each new partition as a snapshot of version V under a fresh token (state/rescale.py;
            create-only: the old files stay, and stay authoritative until the next step)
    commits[V]: state_tokens := the new tokens; extra["repartition"] = {from, to, at_ms,
        previous_state_tokens}: the switch (one row update); batch V+1 opens the new partitions
    conf.json: state_partitions := N (the query then starts with option state_partitions=N)

The fence entry stays: a runner that was running (idle between batches) fails its next plan's
insert of offsets[V+1] and stops (ConcurrentRunError naming the command and the new count); the
next runner started with the new count plans batch V+1 over the fence entry (execution/steps.py);
one started with any other count is refused. So no runner can commit a batch on the old
partitioning after the command began.

A crash before the commit row is updated leaves the checkpoint as it was (new snapshots unused,
the fence entry in place: the rerun takes it over); after it, a rerun of the same command
completes conf.json. The output of later batches equals an
unrescaled run's: every key lands where a query started with N partitions would have put it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
import uuid
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from state import make_provider
from state.encoding import decode_key, encode_value
from state.rescale import read_version, write_snapshot

from .. import storage
from ..errors import AnalysisException, ConcurrentRunError, IncrementsError
from ..operators import join_state as js
from ..operators.partitioning import partition_ids
from ..types import duckdb_to_arrow
from .log import BARRIER_KEY, BatchLog, OffsetsEntry, resolve_log_url
from .metadata import read_metadata


def repartition(checkpoint: Any, partitions: int, log_url: str | None = None,
                storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rewrite the state of the query at `checkpoint` into `partitions` partitions (module doc);
    returns {"batch_id", "from", "to", "stores": {store: rows}}."""
    if partitions < 1:
        raise AnalysisException("increments repartition: --partitions must be >= 1")
    loc = storage.location(checkpoint, storage_options)
    meta = read_metadata(loc)
    if meta is None:
        raise AnalysisException(f"increments repartition: {loc.url} is not a query checkpoint (no metadata.json)")
    conf = loc.read_json("conf.json")
    old = int(conf.get("state_partitions", 1))
    log = BatchLog(resolve_log_url(log_url, loc), meta["id"], meta.get("name") or "")
    last_off, last = log.latest_offsets(), log.latest_commit()
    fence = last_off if last_off is not None and last_off.barrier is not None else None
    if fence is None and last_off is not None and (last is None or last.batch_id < last_off.batch_id):
        raise AnalysisException(
            f"increments repartition: batch {last_off.batch_id} of {loc.url} is planned but not committed (a runner "
            f"may be running it); start the query (with its current {old} partitions) until that batch commits, stop "
            f"it, then repartition")
    if partitions != old:
        _take_ownership(log, loc, fence, last_off, last, old, partitions, conf)
    done = (last.extra.get("repartition") or {}) if last is not None else {}
    result = {"batch_id": last.batch_id if last else None, "from": old, "to": partitions, "stores": {}}
    if last is not None and done.get("to") == partitions and len(next(iter(last.extra.get("state_tokens") or {"": [0] * partitions}.values()))) == partitions:
        result["from"] = done.get("from", old)              # an interrupted run: only conf.json was left
    elif partitions != old and last is not None and last.extra.get("state_tokens"):
        new_tokens, rows = _rewrite(loc, conf, last.batch_id, last.extra["state_tokens"], old, partitions)
        result["stores"] = rows
        _record(log, last.batch_id, new_tokens, old, partitions, last.extra["state_tokens"])
    if partitions != old:
        loc.write_json("conf.json", {**conf, "state_partitions": partitions})
    return result


def _take_ownership(log: BatchLog, loc: Any, fence: OffsetsEntry | None, last_off: OffsetsEntry | None,
                    last: Any, old: int, new: int, conf: dict[str, Any]) -> None:
    """offsets[V+1] as a fence entry (module doc); refused while a runner holds V+1."""
    barrier = {"by": "increments repartition", "from": old, "to": new, "at_ms": int(time.time() * 1000)}
    batch = fence.batch_id if fence is not None else (last.batch_id + 1 if last is not None else 0)
    end = dict(last_off.end) if last_off is not None and fence is None else (dict(fence.end) if fence else {})
    entry = OffsetsEntry(batch, end, end, last.next_watermark_ms if last else 0,
                         last_off.watermark_ms if last_off is not None else 0,
                         dict(last.next_input_watermarks_ms) if last else {}, barrier["at_ms"],
                         {"state_partitions": new, "state_store": conf.get("state_store"), BARRIER_KEY: barrier})
    owner = f"repartition-{uuid.uuid4().hex[:12]}"
    try:
        if fence is not None:
            log.take_over(fence, entry, owner)
        else:
            log.write_offsets(entry, owner)
    except ConcurrentRunError:
        cur = log.offsets.owner(batch)
        raise AnalysisException(
            f"increments repartition: a runner of the query at {loc.url} is active: it planned batch {batch} "
            f"(run {cur[0] if cur else '?'}) while this command took the query's ownership; nothing was changed. "
            f"Stop the query (every runner, Dagster runs and sensors included), then repartition.") from None


def _rewrite(loc: Any, conf: dict[str, Any], version: int, tokens: dict[str, list], old: int,
             new: int) -> tuple[dict[str, list], dict[str, int]]:
    schemas = {k[len("state_schema["):-1].split(":", 1)[0]: (k[len("state_schema["):-1].split(":", 1)[1], v)
               for k, v in conf.items() if k.startswith("state_schema[")}
    provider_name = conf.get("state_store", "rocksdb")
    provider = make_provider(provider_name, loc, local_dir=tempfile.mkdtemp(prefix="increments-repartition-"))
    new_tokens: dict[str, list] = {}
    counts: dict[str, int] = {}
    try:
        for store_id, toks in tokens.items():
            if len(toks) != old:
                raise AnalysisException(f"increments repartition: commits[{version}] names {len(toks)} partitions of "
                                        f"state store {store_id}, the checkpoint's conf {old}")
            primary, _, suffix = store_id.partition("-")
            if primary not in schemas:
                raise AnalysisException(f"increments repartition: state store {store_id} has no operator in the "
                                        "checkpoint's conf")
            name, schema = schemas[primary]
            rows = [r for p in range(old) for r in read_version(provider, store_id, p, version, toks[p])]
            if name == "symmetricHashJoin":
                parts = _join_parts(rows, new)
            else:
                assign = _partitioner(store_id, name, schema, suffix)
                ids = assign([k for k, _ in rows], new) if rows else []
                parts = [([], []) for _ in range(new)]
                for (k, v), p in zip(rows, ids):
                    parts[p][0].append(k)
                    parts[p][1].append(v)
            new_tokens[store_id] = [write_snapshot(provider_name, loc, store_id, p, version, ks, vs)
                                    for p, (ks, vs) in enumerate(parts)]
            counts[store_id] = len(rows)
    finally:
        provider.close()
    return new_tokens, counts


def _record(log: Any, batch_id: int, new_tokens: dict[str, list], old: int, new: int,
            previous: dict[str, list]) -> None:
    """The switch: commits[batch_id] names the new tokens (one row update)."""
    t = log.commits.table
    body = log.commits.get(batch_id)
    for k in ("batch_id", "_owner", "_attempt", "_created_at"):
        body.pop(k, None)
    extra = body.setdefault("extra", {})
    extra["repartition"] = {"from": old, "to": new, "at_ms": int(time.time() * 1000),
                            "previous_state_tokens": previous}
    extra["state_tokens"] = new_tokens
    with log.engine.begin() as c:
        c.execute(t.update().where(t.c.query_id == log.query_id, t.c.batch_id == batch_id)
                  .values(body=json.dumps(body, sort_keys=True)))


# -- key -> partition, per operator (the functions the operators hash with) --------------------------
def _arrow_type(store: str, column: str, name: str) -> pa.DataType:
    """The Arrow type of a key column from the type name its state schema recorded."""
    t = duckdb_to_arrow(name)
    if t is None:
        raise AnalysisException(
            f"increments repartition: state store {store}: key column {column!r} has type {name!r}, which "
            "repartition cannot read back to hash it; the state was not changed (keep the current number "
            "of partitions, or rebuild the state from the sources with a new checkpoint)")
    return t


def _hash(values: list[tuple], types: list[pa.DataType], n: int) -> list[int]:
    """operators/partitioning.partition_ids over columns of these types (the operators'
    partition_sql)."""
    if not types:
        return [0] * len(values)
    cols = [f"c{i}" for i in range(len(types))]
    table = pa.table({c: pa.array([v[i] for v in values], t) for i, (c, t) in enumerate(zip(cols, types))})
    return partition_ids(table, cols, n).to_pylist()


def _partitioner(store: str, name: str, schema: dict[str, Any], suffix: str) -> Callable[[list[bytes], int], list[int]]:
    fields = [tuple(f) for f in schema.get("key") or []]

    def plain(keys: list[bytes], n: int, skip: int, tfields: list, time_first: bool = False) -> list[int]:
        dec = [decode_key(k)[skip:] for k in keys]
        types = [_arrow_type(store, c, t) for c, t in tfields]
        if time_first:       # the event time is stored as µs; the operator hashed the timestamp column
            dec = [(pa.scalar(d[0], pa.int64()).cast(pa.timestamp("us", tz="UTC")).as_py(),) + tuple(d[1:])
                   for d in dec]
        return _hash(dec, types, n)

    if name == "stateStoreSave":
        def agg(keys: list[bytes], n: int) -> list[int]:
            first = decode_key(keys[0])
            if schema.get("window"):       # (window end, window start, *keys): hashed on (start, *keys)
                return plain(keys, n, 1, [("__ws", "BIGINT")] + fields[2:])
            if fields and fields[0][1] == "TIMESTAMPTZ" and isinstance(first[0], int):   # watermarked time key
                return plain(keys, n, 1, fields[1:])
            return plain(keys, n, 0, fields)
        return agg
    if name in ("dedupe", "dedupeWithinWatermark"):
        def dedup(keys: list[bytes], n: int) -> list[int]:
            if suffix == "byexpiry":       # (expiry µs, *subset keys)
                return plain(keys, n, 1, fields)
            first = decode_key(keys[0])
            time_first = (not schema.get("within_watermark") and fields and fields[0][1] == "TIMESTAMPTZ"
                          and isinstance(first[0], int))
            return plain(keys, n, 0, fields, time_first=bool(time_first))
        return dedup
    if name == "applyChanges":      # (*keys[, *sequence]); tombstones (created ms, *keys[, *sequence])
        nkeys = int(schema.get("num_keys") or len(fields))

        def cdc(keys: list[bytes], n: int) -> list[int]:
            return plain(keys, n, 1 if suffix == "tombstones" else 0, fields[:nkeys])
        return cdc
    raise AnalysisException(f"increments repartition: operator {name} is not supported yet (aggregations, "
                            "deduplications, stream-stream joins and apply_changes are); its state was not changed")


def _join_parts(rows: list[tuple[bytes, bytes]], n: int) -> list[tuple[list, list]]:
    """The join's chunks regrouped: each stored row to md5(__k) % n (join.py's partition), one chunk
    per (side, batch) per partition as the operator writes them, and each partition's row counts."""
    side_of = {v: k for k, v in js.TAGS.items()}
    groups: dict[tuple[int, str, int], list[pa.Table]] = {}
    for k, v in rows:
        key = decode_key(k)
        if key[0] != "C":
            continue                                   # the ("#",) row counts: recomputed below
        table = js.chunk_rows(v)
        ids = [int.from_bytes(hashlib.md5(s.encode()).digest(), "little") % n if s is not None else 0
               for s in table.column("__k").to_pylist()]
        arr = pa.array(ids, pa.int32())
        for p in sorted(set(ids)):
            groups.setdefault((p, key[1], key[3]), []).append(table.filter(pc.equal(arr, p)))
    parts: list[tuple[list, list]] = [([], []) for _ in range(n)]
    counts = [[0, 0] for _ in range(n)]
    for (p, tag, batch), tables in sorted(groups.items()):
        table = pa.concat_tables(tables)
        side = side_of[tag]
        parts[p][0].append(js.chunk_key(side, table, batch))
        parts[p][1].append(js._blob(table))
        counts[p][0 if side == "left" else 1] += table.num_rows
    for p in range(n):
        if counts[p] != [0, 0]:
            parts[p][0].append(js.COUNT_KEY)
            parts[p][1].append(encode_value(tuple(counts[p])))
    return parts


def main(argv: list[str] | None = None) -> int:
    """`increments repartition <checkpoint> --partitions N [--log-url URL] [--storage-option K=V ...]`
    (increments/cli.py; also `python -m increments.checkpoint.repartition ...`)."""
    p = argparse.ArgumentParser(prog="increments repartition",
                                description="rewrite a stopped query's state into N state partitions")
    add_arguments(p)
    args = p.parse_args(argv)
    return run(args)


def add_arguments(p: Any) -> None:
    p.add_argument("checkpoint", help="the query's checkpoint directory or URL")
    p.add_argument("--partitions", type=int, required=True, help="the new number of state partitions")
    p.add_argument("--log-url", help="SQLAlchemy URL of the query's log (default: the log_url the checkpoint uses)")
    p.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                   help="an object-store option (delta-rs' names), e.g. aws_endpoint_url=...; repeatable")


def run(args: Any) -> int:
    opts = dict(kv.split("=", 1) for kv in (args.storage_option or []))
    storage.remember_secrets(opts)
    try:
        res = repartition(args.checkpoint, args.partitions, args.log_url, opts)
    except IncrementsError as e:
        msg = storage.redact(str(e))
        raise SystemExit(msg if msg.startswith("increments repartition:") else f"increments repartition: {msg}") from None
    if res["from"] == res["to"]:
        print(f"the checkpoint already has {res['to']} state partitions; nothing changed")
        return 0
    where = "no committed batch: only the checkpoint's conf changed" if res["batch_id"] is None else (
        f"state of batch {res['batch_id']}: " + ", ".join(f"store {k} {n} rows" for k, n in res["stores"].items()))
    print(f"state partitions {res['from']} -> {res['to']} ({where}). Start the query with "
          f".option(\"state_partitions\", {res['to']}).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

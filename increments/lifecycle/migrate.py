"""`increments migrate`: move a changed query to a new checkpoint with a backfill, then switch over.

A change `increments check` calls unsafe (a new aggregate, grouping key, ...) cannot continue on the
old checkpoint; Spark's advice is a new checkpoint plus a backfill. migrate does both:

1. backfill: the changed query runs on the new checkpoint (`--to`) as AvailableNow drains from the
   earliest offsets (`--backfill earliest`: a Kafka source reads from "earliest" whatever its
   starting_offsets; a file or Delta source reads everything from the start on a new checkpoint),
   writing into a staging Delta table beside the sink (`<sink path>__migrate`). Readers keep reading
   the old query's table meanwhile. With `--backfill-from-sink` (lifecycle/from_sink.py: its
   contract, what it refuses) the first drain reads the old query's table instead of the source,
   batch for batch under the old query's own offsets, so the new checkpoint's log ends at the old
   query's last committed offsets and the next drains read the source from exactly there.
2. catch up: drains repeat until the new query's committed source offsets are at or past the old
   query's last committed offsets (read from the old checkpoint's log after each drain, so an old
   query still running is followed); numbers compare, Kafka's per-partition and Delta's offsets part
   by part. Not caught up after `max_rounds` drains: an error, nothing switched. Data arriving after
   the old query's last batch is the new query's to read after the switch.
3. switch over: one overwrite commit of the sink table with the staging table's rows (a new Delta
   version of the sink, schema replaced), carrying the new query's app transaction (its query id,
   its last batch id). Readers see the old result up to version V and the new query's result from
   V + 1: no gap, no double counts. From then on the changed query runs on the new checkpoint and the
   original sink path: its Delta sink skips the batches the switch wrote and appends the rest.

Stop the old query before migrating. The switch retires the old checkpoint: it writes
`retired.json` there, and a start of any query on it is refused, naming the new checkpoint (so the
old query cannot write into the switched table again); and it removes the staging table. Delta sinks only (the switch is a Delta commit).
A refused request (the current checkpoint as `--to`, a non-Delta sink, the from-sink contract) is
refused before anything is written to the new checkpoint or the sink.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from typing import Any, Callable

from deltalake import write_deltalake

from .. import storage
from ..checkpoint.log import open_log
from ..checkpoint.metadata import _read_conf, read_metadata
from ..errors import AnalysisException
from ..execution.runtime import start_conf
from ..options import writer_options
from ..plan import nodes as n
from ..sinks.delta import commit_properties, open_table, read_table
from .from_sink import check_rows, offset_key, plan_backfill
from .from_sink_source import backfill_writer


@dataclasses.dataclass
class MigrateResult:
    query_id: str
    rounds: list[dict[str, Any]]
    staging_table: str
    sink_path: str
    sink_version: int | None
    last_batch_id: int | None


def _earliest(node: Any) -> None:
    """Every Kafka source of the logical plan reads from the earliest offsets."""
    if isinstance(node, n.SourceNode):
        if hasattr(node.source, "starting_offsets"):
            node.source.starting_offsets = "earliest"
        return
    for f in dataclasses.fields(node):
        child = getattr(node, f.name)
        if isinstance(child, n.Node):
            _earliest(child)


def _sink_fingerprint(writer: Any, path: str, opts: dict[str, Any]) -> Any:
    s = dataclasses.replace(writer.settings, path=path, options=dict(writer.settings.options))
    return start_conf(writer.frame, s, opts)[2]["plan"]["sink"]


def _point_conf_at_sink(loc: Any, writer: Any, sink_path: str, opts: dict[str, Any]) -> None:
    """After the switch: the new checkpoint's fixed plan names the original sink path (the next
    start compares with it; its log identity row follows at that start)."""
    conf = _read_conf(loc)
    conf["plan"] = {**conf["plan"], "sink": _sink_fingerprint(writer, sink_path, opts)}
    loc.write_json("conf.json", conf)


def _committed_end(log_url: str | None, loc: Any) -> dict[str, Any] | None:
    """The end offsets (per source index) of the last batch the checkpoint's log committed."""
    meta = read_metadata(loc)
    if meta is None:
        return None
    log = open_log(log_url, loc, meta["id"])
    c = log.latest_commit()
    e = log.get_offsets(c.batch_id) if c is not None else None
    return dict(e.end) if e is not None else None


def _at_least(a: Any, b: Any) -> bool:
    """Offset a is at or past offset b: numbers compare, dicts (Kafka topic/partition, Delta
    version/index) and lists compare part by part; anything else must be equal."""
    if a == b:
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a >= b
    if isinstance(a, dict) and isinstance(b, dict):
        return all(k in a and _at_least(a[k], v) for k, v in b.items())
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return all(_at_least(x, y) for x, y in zip(a, b))
    return False


def _behind(new: dict[str, Any] | None, old: dict[str, Any] | None) -> list[str]:
    """The sources at which the new query's committed offsets are short of the old query's."""
    if not old:
        return []
    new = new or {}
    return [f"source {i}: new {_json(new.get(i))}, old {_json(o)}" for i, o in sorted(old.items())
            if not _at_least(new.get(i), o)]


def _json(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), default=str)


def _drain(writer: Any, staging_table: str, r: int, phase: str) -> dict[str, Any]:
    """One AvailableNow drain of `writer` into the staging table; its summary."""
    q = writer.start(staging_table)
    q.await_termination()
    batches = [p for p in q.recent_progress if p.get("num_input_rows")]
    return {"round": r, "phase": phase, "batches": len(batches), "input_rows": sum(p["num_input_rows"] for p in batches),
            "last_batch_id": q.last_progress["batch_id"] if q.last_progress else None}


def _backfill_from_sink(writer: Any, drain: Any, sink_path: str, opts: dict[str, Any], staging_table: str, new_loc: Any,
                        sink_check: bool, rounds: list[dict[str, Any]], report: Callable[[str], None],
                        on_round: Callable[[dict[str, Any]], None] | None) -> None:
    """--backfill-from-sink (lifecycle/from_sink.py): check the contract, then one drain of the changed
    query reading the old table under the old query's offsets; the new checkpoint's log then ends at
    the old query's last committed offsets, where the source drains continue."""
    name = drain.settings.query_name or storage.redact_url(sink_path)
    bf = plan_backfill(writer, sink_path, opts, name)
    if sink_check:
        n, rows = check_rows(bf, bf.check_source, opts)
        report(f"rows check: the old table holds the source's rows of the old query's last {n} batches with data "
               f"({rows} rows) unchanged in the columns the changed query reads {bf.columns}")
    else:
        report("rows check skipped (sink_check=False): the old table is taken as the source's rows unchanged")
    r = len(rounds)
    rounds.append(_drain(backfill_writer(drain, bf), staging_table, r, "sink"))
    end = (_committed_end(writer_options(drain.settings, required=False)["log_url"], new_loc) or {}).get("0")
    rounds[-1]["caught_up"] = False
    report(f"drain {r}: backfill from the old table {bf.table} (versions up to {max(bf.versions.values())}, the old "
           f"query's batches 0..{bf.batches[-1].batch_id}): {rounds[-1]['batches']} batches, "
           f"{rounds[-1]['input_rows']} input rows")
    if on_round is not None:
        on_round(rounds[-1])
    if end is None or offset_key(end) != offset_key(bf.last):
        raise AnalysisException(f"increments migrate --backfill-from-sink: query {name!r}: after the backfill from "
                                f"{bf.table} the new checkpoint {new_loc.url} stands at offsets {_json(end)}, not at "
                                f"the old query's last committed offsets {_json(bf.last)}; nothing was switched over")
    report(f"drain {r}: the new checkpoint continues from the source at the old query's offsets {_json(bf.last)}")


def _retire(old: Any, opts: dict[str, Any], to_url: str, sink_path: str) -> None:
    """The old checkpoint can no longer write into the switched table: build_runtime refuses a
    checkpoint holding retired.json, naming the new one."""
    if not old:
        return
    loc = storage.location(old, opts)
    if loc.exists("metadata.json"):
        loc.write_json("retired.json", {"to": to_url, "sink": storage.redact_url(sink_path),
                                        "at": dt.datetime.now(dt.timezone.utc).isoformat()})


def _refuse_finished(old: Any, new_loc: Any, sink_path: str, staging_table: str, opts: dict[str, Any]) -> None:
    """A rerun of a migrate that switched over (the old checkpoint holds retired.json): say so,
    and remove a staging table a crash after the switch left behind; nothing else is touched."""
    try:
        r = old.read_json("retired.json")
    except FileNotFoundError:
        return
    to = storage.location(r.get("to") or "", opts).url if r.get("to") else None
    if to != new_loc.url:
        raise AnalysisException(
            f"increments migrate: the checkpoint {old.url} was already migrated to {r.get('to')} (switched over "
            f"{r.get('at')}); it is retired. To change the query again, migrate from that checkpoint: run the "
            f"changed query with checkpoint_location({r.get('to')!r}) and `increments migrate ... --to NEW`")
    removed = ""
    st = storage.location(staging_table, opts)
    if st.list(""):
        st.delete_prefix("")
        removed = f" Its leftover staging table {storage.redact_url(staging_table)} was removed."
    raise AnalysisException(
        f"increments migrate: this migration is done: {storage.redact_url(sink_path)} was switched over to the "
        f"changed query on {new_loc.url} at {r.get('at')}, and the old checkpoint {old.url} is retired.{removed} "
        f"Nothing to do: run the changed query with checkpoint_location({new_loc.url!r}).")


def migrate(writer: Any, to_checkpoint: str, path: str | None = None, backfill: str = "earliest",
            max_rounds: int = 50, report: Callable[[str], None] = print,
            between_rounds: Callable[[int], None] | None = None,
            on_round: Callable[[dict[str, Any]], None] | None = None, sink_check: bool = True) -> MigrateResult:
    """See the module doc. `writer` is the changed query's writer (its checkpoint is the old one).
    `backfill`: "earliest" or "from-sink" (lifecycle/from_sink.py; `sink_check=False` skips its
    rows check). Each drain's summary goes to `on_round` ({"round", "phase": "sink" | "source",
    "batches", "input_rows", "last_batch_id", "caught_up"})."""
    if backfill not in ("earliest", "from-sink"):
        raise AnalysisException(f"increments migrate: unknown backfill {backfill!r}")
    s = writer.settings
    if (s.format or "").lower() != "delta" or s.foreach_batch is not None or s.sink is not None:
        raise AnalysisException(f"increments migrate switches over a Delta sink; this query writes format "
                                f"{s.format!r}: run the changed query on a new checkpoint and a new sink instead")
    o = writer_options(s, required=False)
    sink_path = path or s.path or o["path"]
    if not sink_path:
        raise AnalysisException("increments migrate: the query has no sink path")
    sink_path = os.fspath(sink_path)
    opts = dict(o["storage_options"] or {})
    old = s.checkpoint or o["checkpoint_location"]
    new_loc = storage.location(to_checkpoint, opts)
    if old and storage.location(old, opts).url == new_loc.url:
        raise AnalysisException(f"increments migrate: --to {new_loc.url} is the query's current checkpoint; "
                                "migrate to a new checkpoint location")
    staging_table = sink_path.rstrip("/") + "__migrate"
    if old:
        _refuse_finished(storage.location(old, opts), new_loc, sink_path, staging_table, opts)
    rounds: list[dict[str, Any]] = []
    drain = writer.checkpoint_location(to_checkpoint).trigger(available_now=True)
    if backfill == "from-sink":
        _backfill_from_sink(writer, drain, sink_path, opts, staging_table, new_loc, sink_check, rounds, report, on_round)
    else:
        _earliest(writer.frame.node)
    behind: list[str] = ["no drain ran"]
    for r in range(len(rounds), len(rounds) + max_rounds):
        rounds.append(_drain(drain, staging_table, r, "source"))
        report(f"drain {r}: {rounds[-1]['batches']} batches, {rounds[-1]['input_rows']} input rows")
        if on_round is not None:
            on_round(rounds[-1])
        old_end = _committed_end(o["log_url"], storage.location(old, opts)) if old else None
        behind = _behind(_committed_end(o["log_url"], new_loc), old_end)
        rounds[-1]["caught_up"] = not behind
        if not behind:
            report(f"drain {r}: caught up with the old query's last committed offsets {_json(old_end)}")
            break
        report(f"drain {r}: behind the old query's last committed offsets: {'; '.join(behind)}")
        if between_rounds is not None:
            between_rounds(r)
    else:
        raise AnalysisException(f"increments migrate: after {max_rounds} drains the new query has not caught up with "
                                f"the old query's last committed offsets ({'; '.join(behind)}); nothing was switched "
                                "over. Stop the old query (its offsets keep moving), or check that the data it read is "
                                "still retained")
    meta = read_metadata(new_loc)
    assert meta is not None
    log = open_log(o["log_url"], new_loc, meta["id"], s.query_name or meta["id"])
    last = log.latest_commit()
    last_id = last.batch_id if last is not None else None
    if (_read_conf(new_loc).get("plan") or {}).get("sink") != _sink_fingerprint(drain, staging_table, opts):
        raise AnalysisException(f"increments migrate: the checkpoint {new_loc.url} was switched over to the sink "
                                "already (or belongs to another query); run the changed query on it")
    if open_table(staging_table, opts or None) is not None:
        table = read_table(staging_table, opts or None)[0]
    else:       # no output yet (e.g. windows still open): the switch empties the old result
        table = start_conf(drain.frame, drain.settings, opts)[0].output_schema.empty_table()
    version = None
    if table is not None and last_id is not None:
        write_deltalake(sink_path, table, mode="overwrite", schema_mode="overwrite", storage_options=opts or None,
                        commit_properties=commit_properties(meta["id"], last_id))
        version = open_table(sink_path, opts or None).version()
        _point_conf_at_sink(new_loc, drain, sink_path, opts)
        _retire(old, opts, new_loc.url, sink_path)
        storage.location(staging_table, opts).delete_prefix("")
        report(f"switched over: {storage.redact_url(sink_path)} version {version} holds the changed query's result "
               f"up to batch {last_id} ({table.num_rows} rows)")
    else:
        report("nothing to switch over: the backfill committed no batch")
    return MigrateResult(meta["id"], rounds, staging_table, sink_path, version, last_id)

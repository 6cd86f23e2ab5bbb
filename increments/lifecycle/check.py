"""`increments check`: rehearse a restart of a changed query against its checkpoint.

The changed query's plan is compiled and its start conf computed (execution.runtime.start_conf)
without running a batch and without writing anything: no checkpoint file, no log row (the log is
not opened). It is compared with what the checkpoint fixed at its first run (conf.json: the plan
fingerprint, the stateful operators' state schemas, state partitions and provider, the watermark
columns), and every difference is named with the rule of Spark's "Recovery Semantics after Changes
in a Streaming Query" it falls under. Exit status 0: a restart is safe; 1: it is not.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
from .. import storage
from ..checkpoint.metadata import _read_conf, read_metadata, upgraded_conf
from ..errors import IncrementsError
from ..execution.runtime import start_conf
from ..options import writer_options
from ..sinks.delta import open_table, schema_difference

SPARK_DOC = "Spark: Structured Streaming guide, 'Recovery Semantics after Changes in a Streaming Query'"


@dataclass
class Finding:
    safe: bool
    what: str
    rule: str

    def line(self) -> str:
        return f"  {'ok  ' if self.safe else 'UNSAFE'} {self.what}\n         rule: {self.rule}"


@dataclass
class Report:
    query: str
    checkpoint: str
    findings: list[Finding]
    first_start: bool = False

    @property
    def safe(self) -> bool:
        return all(f.safe for f in self.findings)

    def text(self) -> str:
        head = f"query {self.query} against checkpoint {self.checkpoint}: "
        if self.first_start:
            return head + "no checkpoint there yet; the first start creates it. Restart safe."
        unsafe = [f for f in self.findings if not f.safe]
        out = [head + ("restart is SAFE" if not unsafe else
                       f"restart is NOT SAFE ({len(unsafe)} incompatible change{'s' if len(unsafe) > 1 else ''})")]
        out += [f.line() for f in self.findings]
        if unsafe:
            out.append("A start of this query on this checkpoint is refused (IncompatibleCheckpointError). Keep the "
                       "original query, or run it on a new checkpoint: `increments migrate <query> --to <new "
                       "checkpoint> --backfill earliest` (or --backfill-from-sink for a pass-through query whose "
                       "source no longer holds the whole history: its table stands in for it).")
        return "\n".join(out)


def load_writer(target: str) -> tuple[Any, str | None]:
    """The writer of `module:function` or of a query registered (by query name, or function name)
    in $INCREMENTS_QUERIES (default examples.queries); and the path of its @streaming_query, if any."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    if ":" in target:
        mod_name, _, fn_name = target.partition(":")
        try:
            fn = getattr(importlib.import_module(mod_name), fn_name)
        except (ModuleNotFoundError, AttributeError) as e:
            raise SystemExit(f"increments check: cannot load {target!r}: {e}") from None
        return _call(fn)
    module = os.environ.get("INCREMENTS_QUERIES", "examples.queries")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise SystemExit(f"increments check: {target!r} is not module:function, and the registered queries cannot be "
                         f"looked up: the module {module!r} does not import here ({e}). Set INCREMENTS_QUERIES.") from None
    fns = getattr(mod, "QUERIES", None) or [v for v in vars(mod).values()
                                            if callable(v) and hasattr(v, "__increments_query__")]
    for fn in fns:
        fn = fn[0] if isinstance(fn, tuple) else fn
        writer, path = _call(fn)
        if target in (writer.settings.query_name, getattr(fn, "__name__", None)):
            return writer, path
    raise SystemExit(f"increments check: no query named {target!r} registered in {module}")


def _call(fn: Callable) -> tuple[Any, str | None]:
    try:
        writer = fn()
    except IncrementsError as e:        # e.g. a source's unknown keyword option (increments/options.py)
        raise SystemExit(f"increments check: {getattr(fn, '__name__', fn)}() does not define a query: {e}") from None
    if not hasattr(writer, "settings") or not hasattr(writer, "frame"):
        raise SystemExit(f"increments check: {fn!r} returned {type(writer).__name__}, not a write_stream writer "
                         "(return the writer, without calling start)")
    return writer, (getattr(fn, "__increments_query__", None) or {}).get("path")


def check(writer: Any, path: str | None = None, checkpoint: str | None = None,
          storage_options: dict[str, Any] | None = None) -> Report:
    """Compare the writer's query with its checkpoint; writes nothing."""
    s = dataclasses.replace(writer.settings, options=dict(writer.settings.options))
    if path is not None and not s.path:
        s.path = path
    o = writer_options(s)     # unknown or mistyped options, a sink without its path: refused, named
    opts = {**(o["storage_options"] or {}), **(storage_options or {})}
    storage.remember_secrets(opts)
    chk = checkpoint or s.checkpoint or o["checkpoint_location"]
    if not chk:
        raise SystemExit("increments check: the query has no checkpoint_location; pass --checkpoint")
    loc = storage.location(chk, opts)
    name = s.query_name or str(chk)
    plan, sink, conf = start_conf(writer.frame, s, opts)
    meta = read_metadata(loc)
    if meta is None:
        return Report(name, loc.url, [], first_start=True)
    fixed = _read_conf(loc)
    if not fixed:
        return Report(name, loc.url, [Finding(False, f"{loc.join('conf.json')} is missing: nothing to compare with",
                                              "the start restores it from the log's identity row and compares then; "
                                              "restore conf.json from a backup, or start the query once")])
    findings = compare(upgraded_conf(fixed), _as_stored(conf))
    findings += _sink_schema(sink, plan, s.output_mode, opts)
    if not all(f.safe for f in findings):
        findings = [f for f in findings if not f.safe]
    return Report(name, loc.url, findings)


def _sink_schema(sink: Any, plan: Any, mode: str, opts: dict[str, Any]) -> list[Finding]:
    """A changed projection must still fit the sink: a Delta table's schema (complete mode replaces it)."""
    if type(sink).__name__ != "DeltaSink" or mode == "complete":
        return []

    dt = open_table(sink.path, {**opts, **sink.own_storage_options} or None)
    if dt is None:
        return []
    diff = schema_difference(pa.schema(dt.schema().to_arrow()), plan.output_schema)
    if not diff:
        return []
    return [Finding(False, f"output schema changed: {'; '.join(diff)}",
                    "a changed projection is allowed only when the sink accepts the new output schema; the Delta "
                    "table keeps its schema, so the next batch fails (SinkSchemaError)")]


def _as_stored(conf: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(conf))


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[Finding]:
    """The findings of `new` (this start's conf) against `old` (the checkpoint's)."""
    out: list[Finding] = []
    if old.get("state_store") != new.get("state_store"):
        out.append(Finding(False, f"state store provider changed: {old.get('state_store')!r} -> "
                                  f"{new.get('state_store')!r}",
                           "the state store provider is fixed by the checkpoint (Spark: the state store provider "
                           "class cannot change between restarts)"))
    if old.get("state_partitions") != new.get("state_partitions"):
        out.append(Finding(False, f"number of state partitions changed: {old.get('state_partitions')} -> "
                                  f"{new.get('state_partitions')}",
                           "the state's partitioning is fixed by the checkpoint (Spark: spark.sql.shuffle.partitions "
                           "cannot change between restarts); stop the query and run `increments repartition "
                           f"<checkpoint> --partitions {new.get('state_partitions')}` instead"))
    op_, np_ = old.get("plan") or {}, new.get("plan") or {}
    out += _sources(op_.get("sources") or [], np_.get("sources") or [])
    out += _stateful(old, new)
    if op_.get("sink") != np_.get("sink"):
        out.append(Finding(False, f"sink changed: {op_.get('sink')} -> {np_.get('sink')}",
                           "changes in the type or location of the output sink are not allowed: the checkpoint's "
                           "batch ids are the old sink's (Spark: e.g. a file sink's output directory cannot change)"))
    ow, nw = old.get("watermark_columns"), new.get("watermark_columns")
    if ow is not None and ow != nw:
        out.append(Finding(False, f"watermark column changed: {ow} -> {nw}",
                           "the event-time column of with_watermark cannot change: the watermark in the log and the "
                           "state's eviction are in terms of the old column"))
    out += _udfs(old.get("udfs") or [], new.get("udfs") or [])
    known = {"state_store", "state_partitions", "plan", "watermark_columns", "udfs"}
    for k in sorted(set(old) & set(new)):
        if k not in known and not k.startswith(("state_schema[", "state_functions[")) and old[k] != new[k]:
            out.append(Finding(False, f"{k} changed: {old[k]!r} -> {new[k]!r}",
                               "fixed in the checkpoint's conf at the first run"))
    if not [f for f in out if not f.safe]:
        out.append(Finding(True, "sources, stateful operators (keys, aggregates, state schemas), state partitions, "
                                 "sink and watermark columns are as the checkpoint has them",
                           "changes in stateless steps (filter, select, with_column), before or after the last "
                           "stateful operator, are allowed (Spark: changes in projections and filters are allowed) "
                           "as long as the sink accepts the output schema"))
    return out


def _udfs(old: list[str], new: list[str]) -> list[Finding]:
    """A changed Python function (UDF, map_in_*) is named; allowed, as a stateless step."""
    gone, added = [u for u in old if u not in new], [u for u in new if u not in old]
    if not gone and not added:
        return []
    what = "; ".join(([f"removed {', '.join(gone)}"] if gone else []) + ([f"now {', '.join(added)}"] if added else []))
    return [Finding(True, f"Python functions changed since the last start: {what}",
                    "a UDF or map_in_* function is a stateless step: changing it is allowed (Spark), but rows already "
                    "aggregated keep what the old function computed (a UDF in a grouping key or in a filter before "
                    "a stateful operator changes which state new rows reach)")]


def _sources(old: list[str], new: list[str]) -> list[Finding]:
    out = []
    for i in range(max(len(old), len(new))):
        o, n = (old[i] if i < len(old) else None), (new[i] if i < len(new) else None)
        if o == n:
            continue
        if o is None:
            what = f"new source {i} added: {n}"
        elif n is None:
            what = f"source {i} removed: {o}"
        else:
            what = f"source {i} changed: {o} -> {n}"
        out.append(Finding(False, what, "changes in the number or type (or topic, path) of input sources are not "
                                        "allowed: the checkpoint's offsets are per source (Spark)"))
    return out


_SCHEMA_PARTS = {
    "key": ("grouping key changed", "changes in the grouping keys of a stateful operation are not allowed: the state "
                                    "is keyed by them (Spark: the schema of the state keys must stay)"),
    "value": ("aggregate changed", "changes in the aggregates of a stateful operation are not allowed: the state holds "
                                   "their partial values (Spark: the schema of the state values must stay)"),
    "window": ("window changed (size, slide, start)", "the window is part of the grouping key; changing it is not "
                                                      "allowed (Spark)"),
    "how": ("join type changed", "changes in the join type (inner, outer, semi) of a stream-stream join are not allowed "
                                 "(Spark)"),
    "left_keys": ("join keys changed", "changes in the join condition/keys of a stream-stream join are not allowed "
                                       "(Spark)"),
    "right_keys": ("join keys changed", "changes in the join condition/keys of a stream-stream join are not allowed "
                                        "(Spark)"),
    "left": ("join's left input schema changed", "a stream-stream join buffers its inputs' rows in the state; the "
                                                 "schema of the state must stay (Spark)"),
    "right": ("join's right input schema changed", "a stream-stream join buffers its inputs' rows in the state; the "
                                                   "schema of the state must stay (Spark)"),
    "session_gap_ms": ("session gap changed", "the session gap is part of the session state's definition"),
    "within_watermark": ("deduplication kind changed", "dropDuplicates and dropDuplicatesWithinWatermark keep "
                                                       "different state"),
    "time_mode": ("transform_with_state time mode changed", "the processor's timers are kept in that time mode"),
    "layout": ("join state layout changed", "the join state was written in another layout by an earlier release"),
}


def _short(v: Any) -> str:
    if isinstance(v, list) and v and all(isinstance(x, list) and len(x) == 2 for x in v):
        return "[" + ", ".join(f"{a} {b}" for a, b in v) + "]"
    return repr(v)


def _stateful(old: dict[str, Any], new: dict[str, Any]) -> list[Finding]:
    out = []
    os_ = {k[len("state_schema["):-1]: v for k, v in old.items() if k.startswith("state_schema[")}
    ns_ = {k[len("state_schema["):-1]: v for k, v in new.items() if k.startswith("state_schema[")}
    for op in sorted(set(os_) | set(ns_)):
        if op not in ns_:
            out.append(Finding(False, f"stateful operator {op} removed (or replaced)",
                               "adding, removing or replacing a stateful operation (aggregation, deduplication, "
                               "stream-stream join, transform_with_state) is not allowed (Spark)"))
        elif op not in os_:
            out.append(Finding(False, f"stateful operator {op} added (or replaced)",
                               "adding, removing or replacing a stateful operation (aggregation, deduplication, "
                               "stream-stream join, transform_with_state) is not allowed (Spark)"))
        elif os_[op] != ns_[op]:
            o, n = os_[op] or {}, ns_[op] or {}
            for part in sorted(set(o) | set(n)):
                if o.get(part) == n.get(part):
                    continue
                what, rule = _SCHEMA_PARTS.get(part, (f"state schema part {part!r} changed",
                                                      "the schema of a stateful operator's state must stay (Spark)"))
                out.append(Finding(False, f"operator {op}: {what}: {_short(o.get(part))} -> {_short(n.get(part))}",
                                   rule))
    out += _functions(old, new, os_, ns_)
    ops_old = (old.get("plan") or {}).get("stateful_operators") or []
    ops_new = (new.get("plan") or {}).get("stateful_operators") or []
    if ops_old != ops_new and not out:
        out.append(Finding(False, f"stateful operators changed: {ops_old} -> {ops_new}",
                           "changes in stateful operations (their keys) are not allowed (Spark)"))
    return out


def _functions(old: dict[str, Any], new: dict[str, Any], os_: dict[str, Any], ns_: dict[str, Any]) -> list[Finding]:
    """What each stateful operator computes (`state_functions[...]`: aggregates with their inputs, a
    join's condition, apply_changes' sequence_by), compared when both confs have it. A checkpoint written before this was
    recorded has none: nothing to compare with (the start records this query's, a later change is
    caught), said as a note."""
    out = []
    of = {k[len("state_functions["):-1]: v for k, v in old.items() if k.startswith("state_functions[")}
    nf = {k[len("state_functions["):-1]: v for k, v in new.items() if k.startswith("state_functions[")}
    for op in sorted(set(of) & set(nf)):
        if of[op] == nf[op]:
            continue
        if op.endswith(":symmetricHashJoin"):
            out.append(Finding(False, f"operator {op}: join condition changed: {of[op]} -> {nf[op]}",
                               "changes in the join condition of a stream-stream join are not allowed: the "
                               "state keeps rows for the old condition's time bound (Spark)"))
            continue
        if op.endswith(":applyChanges"):
            out.append(Finding(False, f"operator {op}: sequencing changed: {of[op]} -> {nf[op]}",
                               "the state orders each key's changes by the sequence_by columns; changing them is not "
                               "allowed (the stored sequence values are of the old columns)"))
            continue
        what = [f"{a} -> {b}" for a, b in zip(of[op], nf[op]) if a != b]
        if len(of[op]) != len(nf[op]):
            what = [f"{of[op]} -> {nf[op]}"]
        out.append(Finding(False, f"operator {op}: aggregate changed: {'; '.join(what)}",
                           "changes in the aggregates of a stateful operation are not allowed: the state holds "
                           "partial values of the old functions and inputs, even when their schema stays the same "
                           "(Spark: the aggregate functions must stay)"))
    missing = sorted(op for op in nf if op not in of and op in os_ and op in ns_)
    if missing:
        out.append(Finding(True, f"the checkpoint predates recording the aggregate functions of operator(s) "
                                 f"{', '.join(missing)}: they cannot be compared; the next start records "
                                 f"{'; '.join(str(nf[op]) for op in missing)}",
                           "keep the aggregates the checkpoint was written with: a change of function with the same "
                           "state schema (min -> max) is not detected on such a checkpoint until one start recorded "
                           "them"))
    return out

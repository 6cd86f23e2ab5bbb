"""QueryRuntime: everything one process needs to run a query's batch steps.

Built from a frame and the writer's settings by `build_runtime`; the local runner and the Dagster
ops both build one (Dagster once per op process) and call the same five step functions on it.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .. import storage
from ..checkpoint.identity import open_checkpoint
from ..checkpoint.log import BatchLog, resolve_log_url
from ..checkpoint.metadata import CheckpointMetadata
from ..errors import AnalysisException
from ..options import Options, writer_options
from ..plan import nodes as n
from ..plan.compiler import CompiledPlan, Compiler
from ..redaction import logger as redacting_logger
from ..sinks.base import Sink, SinkContext
from ..triggers import Trigger
from .listeners import notify
from .settings import WriterSettings  # noqa: F401  (defined there: the writer API imports it without the engine)
from .sink_factory import make_sink
from .staging import DiskStaging, MemoryStaging
from .state_manager import StateManager

if TYPE_CHECKING:
    import pyarrow as pa

    from ..api.frame import StreamFrame
    from ..plan.nodes import Node
    from ..sources.base import Source


@dataclass
class QueryRuntime:
    name: str
    meta: CheckpointMetadata
    log: BatchLog
    plan: CompiledPlan
    sink: Sink
    settings: WriterSettings
    staging: MemoryStaging | DiskStaging
    state: StateManager
    run_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    listeners: list[Any] = field(default_factory=list)   # objects with some of StreamingQueryListener's methods

    @property
    def query_id(self) -> str:
        return self.meta.query_id

    @property
    def sources(self) -> list[Source]:
        return self.plan.sources

    @property
    def output_mode(self) -> str:
        return self.settings.output_mode

    @property
    def options(self) -> Options:
        """The writer's options, checked and typed (increments/options.py)."""
        return writer_options(self.settings)

    @property
    def watermark_policy(self) -> str:
        return self.options["multiple_watermark_policy"]

    def where(self, batch_id: int | None = None, step: str | None = None) -> str:
        s = f"query {self.name!r} (id {self.query_id})"
        if batch_id is not None:
            s += f", batch {batch_id}"
        if step:
            s += f", {step} step"
        return s

    def emit(self, event: str, *args: Any) -> None:
        notify(self, event, *args)

    def close(self) -> None:
        self.state.close()
        for s in self.sources:
            s.close()
        self.sink.close()
        self.log.close()


def build_runtime(frame: StreamFrame, settings: WriterSettings, staging: str = "memory") -> QueryRuntime:
    """Compile the query, open (or create) its checkpoint and log, attach sources and sink.

    The checkpoint is a Location: a local path, file://, or an object-store URL (s3://, gs://,
    az://, ...) opened with the writer option `storage_options` (a dict, delta-rs' names).
    Refused before anything is written: an unknown scheme of the checkpoint or of the sink path
    (UnknownSchemeError naming it); a remote checkpoint without a PostgreSQL log (AnalysisException).
    Fails before any batch runs when the plan is not streamable or the checkpoint's fixed conf
    (state provider, partitions, stateful operators' state schemas) differs from this start's.
    """
    opts = writer_options(settings)      # unknown keys and wrong types refused before anything is opened
    storage_options = dict(opts["storage_options"] or {})
    storage.remember_secrets(storage_options)
    checkpoint_url = settings.checkpoint or opts["checkpoint_location"]
    if not checkpoint_url:
        if settings.format in ("memory", "console"):
            checkpoint_url = tempfile.mkdtemp(prefix="increments-chk-")
        else:
            raise AnalysisException("checkpoint_location(path) is required for this sink: the checkpoint holds the "
                                    "query id, the seen-files log and the state")
    storage.check_scheme(os.fspath(checkpoint_url), "checkpoint location")
    sink_path = settings.path or opts["path"]
    if sink_path and settings.sink is None and settings.foreach_batch is None:
        storage.check_scheme(os.fspath(sink_path), "sink path")
    checkpoint = storage.location(checkpoint_url, storage_options)
    if checkpoint.exists("retired.json"):      # written by `increments migrate` after its switch-over
        r = checkpoint.read_json("retired.json")
        raise AnalysisException(f"the checkpoint {checkpoint.url} was retired by `increments migrate`: its sink "
                                f"{r.get('sink')} now holds the result of the query on the checkpoint {r.get('to')}; "
                                f"run the query with checkpoint_location({r.get('to')!r})")
    log_url = resolve_log_url(opts["log_url"], checkpoint)
    plan, sink, conf = start_conf(frame, settings, storage_options)
    provider, partitions = conf["state_store"], conf["state_partitions"]
    changelog = opts["changelog_checkpointing"]
    changelog = provider == "rocksdb" if changelog is None else changelog
    name = settings.query_name or opts["query_name"]
    key_columns = next((list(op.key_columns) for op in plan.root.walk() if op.key_columns), [])

    def locate(batch_id: int, needles: list[bytes]) -> str | None:
        """Where in batch N's input files a value is (for sink errors; file sources only)."""
        entry = log.get_offsets(batch_id)
        for i, src in enumerate(plan.sources):
            if entry is not None and hasattr(src, "locate"):
                hit = src.locate(entry.start[str(i)], entry.end[str(i)], needles)
                if hit:
                    return f"source {i} ({src.description}): input {hit}"
        return None

    def sink_context(query_id: str) -> SinkContext:
        return SinkContext(query_id, name or query_id, settings.output_mode, checkpoint, key_columns=key_columns,
                           storage_options=storage_options, locate=locate, log_url=log_url)

    def sink_agrees(query_id: str) -> bool | None:      # asked only when metadata.json or the log was lost
        sink.open(sink_context(query_id))
        return sink.holds_query(query_id)
    meta, log = open_checkpoint(checkpoint, name, conf, log_url, sink_agrees)
    name = name or meta.query_id
    sink.open(sink_context(meta.query_id))
    warn_foreign_output(sink, meta.query_id, name, log)
    for i, src in enumerate(plan.sources):
        src.local_dir = opts["local_dir"]
        src.open(checkpoint, i, name, storage_options)
    state = StateManager(checkpoint, provider, partitions, changelog, opts["local_dir"])
    rt = QueryRuntime(name, meta, log, plan, sink, settings, MemoryStaging(), state)
    if staging == "disk":
        rt.staging = DiskStaging(checkpoint.child("staging"), lambda: rt.run_id)
    return rt


def warn_foreign_output(sink: Sink, query_id: str, name: str, log: BatchLog) -> None:
    """At a query's first start (no batch committed): warn when its sink already holds another
    writer's output, saying what this query's batches do beside it (Sink.foreign_output)."""
    if log.latest_offsets() is not None:
        return
    try:
        what = sink.foreign_output(query_id)
    except Exception:  # noqa: BLE001 - a warning only; the first batch meets the sink's real errors
        return
    if what:
        redacting_logger("increments.sinks").warning("query %r (id %s): %s", name, query_id, what)


def start_conf(frame: StreamFrame, settings: WriterSettings,
               storage_options: dict[str, Any] | None = None) -> tuple[CompiledPlan, Sink, dict[str, Any]]:
    """The compiled plan, the (unopened) sink and the conf a start fixes in, or compares with, the
    checkpoint; nothing is read from or written to the checkpoint (`increments check` uses this)."""
    opts = writer_options(settings)
    # the sources get the query's storage_options before the plan is compiled: compiling asks a
    # Delta source (or a Parquet file source without a schema) for its schema, on the store
    node = frame.node
    if settings.apply_changes is not None:     # AUTO CDC: the sequencing operator at the root
        if settings.output_mode != "append":
            raise AnalysisException(f"apply_changes: output_mode {settings.output_mode!r}; the changes it applies are "
                                    "the rows the query appends (use the default, append)")
        node = n.ApplyChanges(node, settings.apply_changes)
    plan = Compiler(settings.output_mode, opts).compile(_with_own_sources(node, storage_options))
    provider = opts["state_store"]                 # 'rocksdb' or 'memory' (checked by writer_options)
    partitions = opts["state_partitions"]          # >= 1
    conf: dict[str, Any] = {"state_store": provider, "state_partitions": partitions}
    for op in plan.stateful_ops:
        conf[f"state_schema[{op.operator_id}:{op.operator_name}]"] = op.state_schema()
        functions = op.state_functions()
        if functions:   # a key older checkpoints lack: not compared then, and recorded (metadata.open)
            conf[f"state_functions[{op.operator_id}:{op.operator_name}]"] = functions
    sink = settings.sink or make_sink(settings)
    if settings.output_mode not in sink.supported_modes:
        raise AnalysisException(f"{sink.description} supports output modes {sink.supported_modes}, not "
                                f"{settings.output_mode!r}")
    check = getattr(sink, "check_output_schema", None)    # a .sink(...) object may predate the hook
    if check is not None:
        check(plan.output_schema)
    conf["plan"] = plan_fingerprint(plan, sink)
    udfs = [d for op in plan.root.walk() for d in getattr(op, "udf_descriptions", list)()]
    if udfs:        # the Python functions in the plan (named, not fixed: checkpoint/metadata.py)
        conf["udfs"] = udfs
    columns = [op.column for op in plan.root.walk() if type(op).__name__ == "WatermarkOp"]
    if columns:     # the event-time columns of with_watermark (a new key: older checkpoints record it)
        conf["watermark_columns"] = sorted(columns)
    return plan, sink, conf


def plan_fingerprint(plan: CompiledPlan, sink: Sink) -> dict[str, Any]:
    """What makes a checkpoint this query's (fixed at the first run, compared at every start): its
    sources, its stateful operators with their keys, its sink. Stateless steps (select, filter)
    may change, as in Spark."""
    def source(src: Any) -> str:
        return "MemoryStream" if type(src).__name__ == "MemorySource" else src.description

    def op(o: Any) -> str:
        keys = o.key_columns
        return f"{o.operator_id}:{o.operator_name}" + (f" keys={list(keys)}" if keys else "")
    kind = type(sink).__name__
    return {"sources": [source(s) for s in plan.sources],
            "stateful_operators": [op(o) for o in plan.stateful_ops],
            "sink": kind if kind in ("MemorySink", "ConsoleSink", "ForeachBatchSink") else sink.description}


def _with_own_sources(node: Node, storage_options: dict[str, Any] | None = None) -> Node:
    """The logical plan with every source replaced by its for_query() copy: queries started from
    one frame (one source, two sinks, as in Spark) must not share a checkpoint attachment. Each
    copy holds the query-level `storage_options` already (Source.open sets them again)."""
    if isinstance(node, n.SourceNode):
        src = node.source.for_query()
        src.query_storage_options = dict(storage_options or {})
        return dataclasses.replace(node, source=src)
    changes = {f.name: _with_own_sources(getattr(node, f.name), storage_options) for f in dataclasses.fields(node)
               if isinstance(getattr(node, f.name), n.Node)}
    return dataclasses.replace(node, **changes) if changes else node

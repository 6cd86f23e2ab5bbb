"""Registered queries -> Dagster definitions.

A registered query is a function returning an increments DataStreamWriter, not started
(`frame.write_stream.format(...).checkpoint_location(...).query_name(...).trigger(...)`).
For each one `query_definitions` builds:
- the sink as a graph-backed asset (factory.make_batch_asset): one materialization = one
  micro-batch, its ops plan -> read -> process -> write -> commit, so Materialize in the asset
  graph (or `dagster asset materialize --select <key>`, no partition) runs the next batch;
- job `<q>_batch`: that asset's job (one run = one micro-batch), tagged
  increments/query=<q> so the run queue's tag limit keeps one run of the query in flight;
  run retries on (tag dagster/max_retries); executor per query (`executor=`: "in_process" by
  default, "multiprocess", or a Dagster ExecutorDefinition such as dagster_k8s.k8s_job_executor).
  With another executor than in_process (or fanout=True), a query with one stateful operator
  fans its process step out per state partition
  (read -> partition[p] for each p -> join; execution/partitioned.py), so the executor spreads a
  batch over processes or machines; other plans keep one process op (its description says why).
  A table several queries write stays one asset (Dagster allows one definition per key): an
  asset spec that each writer's `<q>_batch` (then an op job over the same graph) materializes by
  event; Materialize is not offered for it (which query's batch would it run?): launch a
  writer's job. A Materialize from the asset graph runs in Dagster's own asset job, without the
  job's tags: the plan op tags the run increments/query, the plan and commit ops are in the pool
  increments/<q> (ops.query_pool: the run queue keeps it one at a time with the query's other
  runs), the location's default executor is the queries' (default_executor), and the shipped
  dagster.yaml retries crashed runs only;
- job `<q>_available_now`: fixes an AvailableNow drain's targets (launch it from the UI);
- sensor `<q>_trigger`: requests the next batch run while none is in flight, when a drain is
  active or (processing_time queries) there is new data or time-based work;
- schedule `<q>_available_now_schedule` (available_now queries): starts a drain on a cron;
- assets named by what the query reads and writes (orchestration/assets.py: kafka/<topic>,
  files/<path>, delta/<path>, postgres/<table>), so lineage spans queries; batch N is the run tagged
  increments/batch_id=N and the materialization with metadata batch_id N; asset checks on the sink.

Failures: each op retries with exponential backoff (RetryPolicy: `max_retries`, `retry_delay_s`);
a run that still fails is not retried as a run (tag dagster/retry_on_asset_or_op_failure=false;
crashed runs are) and the query halts (sensors.py) until a launch of `<q>_batch` commits.

    @streaming_query(path="lake/out")
    def my_query():
        return inc.read_stream.files(...).write_stream.format("parquet").checkpoint_location(...)...

    defs = build_definitions([my_query])          # or definitions_from_module("my.module")
"""
from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import dagster as dg

from increments.options import refuse_unknown, writer_options
from increments.plan.nodes import SourceNode

from .assets import build_assets, sink_asset, source_assets
from .checks import make_checks
from .dagster_internals import check_deployment
from .expectations import make_expectation_checks
from . import preload
from .freshness import make_freshness
from .maintenance import compact_definitions, delta_target, pop_options
from .migrate import make_migrate_job
from .ops import QUERY_TAG, make_ops
from .retention import make_retention
from .schedules import make_drain_anchor, make_drain_job, make_schedule
from .sensors import make_sensor

DEFAULT_CRON = "0 * * * *"
DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_DELAY_S = 2.0


@dataclass
class QuerySpec:
    writer_factory: Callable[[], Any]
    path: str | None
    name: str
    key: str
    trigger: Any
    num_sources: int
    sink_description: str
    sink_key: dg.AssetKey
    source_assets: list[tuple[dg.AssetKey, str]]
    cron_schedule: str = DEFAULT_CRON
    sensor_status: str = "running"
    schedule_status: str = "running"
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_delay_s: float = DEFAULT_RETRY_DELAY_S
    sensor_interval_s: int = 5
    halt_webhook: str | None = None
    extra_tags: dict[str, str] = field(default_factory=dict)
    shared_sink: bool = False          # set by build_definitions when several queries write the sink
    executor: Any = "in_process"       # "in_process", "multiprocess" or a dg.ExecutorDefinition
    fanout_reason: str | None = "not planned"   # None: the process step fans out per state partition
    compact: Any = None                # maintenance.CompactSettings (Delta sinks: <q>_compact job and schedule)
    freshness_grace: str | None = None  # freshness.py: slack of the sink's freshness check (default 5 minutes)
    written_sources: set = field(default_factory=set)   # source keys another query of the location writes

    @property
    def fanout(self) -> bool:
        return self.fanout_reason is None

    def source_keys(self) -> list[dg.AssetKey]:
        return [k for k, _ in self.source_assets]

    def check_name(self, rule: str) -> str:
        return f"{self.key}_{rule}" if self.shared_sink else rule

    @property
    def job_tags(self) -> dict[str, str]:
        return {QUERY_TAG: self.name, "dagster/max_retries": str(self.max_retries),
                "dagster/retry_strategy": "ALL_STEPS", "dagster/retry_on_asset_or_op_failure": "false",
                **self.extra_tags}

    @property
    def drain_job_tags(self) -> dict[str, str]:
        return {QUERY_TAG: self.name, **self.extra_tags}


#: the options of @streaming_query / query_definitions: QuerySpec's settable fields, plus those
#: make_spec and maintenance.pop_options take out first; any other key is refused naming the nearest
SPEC_OPTIONS = ({"cron_schedule", "sensor_status", "schedule_status", "max_retries", "retry_delay_s", "sensor_interval_s",
                 "batch_partitions", "halt_webhook", "extra_tags", "executor", "freshness_grace", "fanout",
                 "compact_cron", "compact_schedule_status", "compact_z_order", "compact_target_size",
                 "vacuum_retention"})


def streaming_query(path: str | None = None, **options: Any) -> Callable:
    """Decorator registering a writer factory; options go to query_definitions (cron_schedule, ...)."""
    def deco(fn: Callable) -> Callable:
        fn.__increments_query__ = {"path": path, **options}
        return fn
    return deco


def _key(name: str) -> str:
    k = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return k if k and not k[0].isdigit() else f"q_{k}"


def make_spec(writer_factory: Callable[[], Any], path: str | None = None, asset_root: str | None = None,
              **options: Any) -> QuerySpec:
    w = writer_factory()
    s = w.settings
    name = s.query_name or writer_options(s, required=False)["query_name"]   # refuses unknown or mistyped options
    if not name:
        raise ValueError(f"{getattr(writer_factory, '__name__', writer_factory)}: a Dagster query needs "
                         ".query_name(...) (it names the job, the assets and the run tag)")
    key = _key(name)
    srcs = [node.source for node in w.frame.node.walk() if isinstance(node, SourceNode)]
    src_assets = [a for i, src in enumerate(srcs) for a in source_assets(src, key, i, asset_root)]
    sink_key, sink_desc = sink_asset(s, path, key, asset_root)
    refuse_unknown(options, SPEC_OPTIONS, f"@streaming_query / query_definitions of query {name!r}")
    interval_s = max(5, int(s.trigger.interval_ms / 1000)) if s.trigger.kind == "processing_time" else 5
    if options.get("halt_webhook") is None:
        options["halt_webhook"] = os.environ.get("INCREMENTS_HALT_WEBHOOK") or None
    resolve_executor(options.get("executor", "in_process"))         # refuse an unknown executor at load
    options["compact"] = pop_options(options)
    return QuerySpec(writer_factory, path, name, key, s.trigger, len(srcs), sink_desc, sink_key, src_assets,
                     sensor_interval_s=int(options.pop("sensor_interval_s", interval_s)),
                     fanout_reason=_fanout_reason(w, options.pop("fanout", None), options.get("executor")),
                     **options)


def _fanout_reason(writer: Any, fanout: bool | None, executor: Any) -> str | None:
    """Why the query's process step does not fan out per state partition (None: it does).
    `fanout` (option of @streaming_query): True fans out when the plan allows, False never, None
    (default) when the executor is not in_process (in one process the partitions would only run
    one after the other, with their slices staged in between)."""
    if fanout is False or (fanout is None and executor in (None, "in_process")):
        return "fanout is off for this query (in_process executor; option fanout=True turns it on)"
    from increments.execution.partitioned import fanout_reason  # noqa: PLC0415 - increments.execution.partitioned (duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path; the planner (DuckDB): only to decide a fan-out
    from increments.plan.compiler import Compiler  # noqa: PLC0415 - increments.plan.compiler (duckdb, numpy, pyarrow): kept off the code location's import path
    s = writer.settings
    try:
        plan = Compiler(s.output_mode, s.options).compile(writer.frame.node)
    except Exception as e:  # noqa: BLE001 - the batch run reports a plan error itself
        return f"the plan did not compile here ({type(e).__name__})"
    return fanout_reason(plan)


def resolve_executor(executor: Any) -> dg.ExecutorDefinition:
    """`executor=` of @streaming_query: "in_process" (default: every op in the run's process),
    "multiprocess" (one process per op on the run's machine), or any Dagster ExecutorDefinition
    (dagster_k8s.k8s_job_executor: one Kubernetes job per op; dagster_celery's celery_executor);
    "celery": dagster-celery's executor on warm workers, partition p always on queue
    increments-p<p mod N> (orchestration/celery.py; needs the `celery` extra)."""
    if executor is None or executor == "in_process":
        return dg.in_process_executor
    if executor == "multiprocess":
        return dg.multiprocess_executor
    if executor == "celery":              # warm Celery workers, partition p routed to one queue (celery.py)
        from .celery import celery_executor  # noqa: PLC0415 - orchestration.celery (celery, dagster_celery, duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path
        return celery_executor()
    if isinstance(executor, dg.ExecutorDefinition):
        return executor
    raise ValueError(f"executor={executor!r}: use 'in_process', 'multiprocess', 'celery' or a Dagster ExecutorDefinition "
                     "(e.g. dagster_k8s.k8s_job_executor)")


def query_definitions(writer_factory: Callable[[], Any], path: str | None = None, **options: Any) -> dg.Definitions:
    """All Dagster definitions for one registered query (see module doc)."""
    return build_definitions([(writer_factory, {"path": path, **options})])


def spec_definitions(spec: QuerySpec) -> dg.Definitions:
    """Jobs, sensor, schedule and checks of one query (its assets come from build_definitions)."""
    batch_job = make_batch_job(spec)
    drain_job = make_drain_job(spec)
    schedules = [make_schedule(spec, drain_job)] if spec.trigger.kind == "available_now" else []
    fresh_check, fresh_sensor = make_freshness(spec, spec.freshness_grace)
    jobs = [batch_job, drain_job, make_drain_anchor(spec)]
    if delta_target(spec.writer_factory(), spec.path) is not None:      # increments migrate: Delta sinks
        jobs.append(make_migrate_job(spec))
    return dg.Definitions.merge(
        dg.Definitions(jobs=jobs, sensors=[make_sensor(spec, batch_job), fresh_sensor],
                       schedules=schedules,
                       asset_checks=make_checks(spec) + [fresh_check] + make_expectation_checks(spec)),
        compact_definitions(spec, spec.compact) if spec.compact is not None else dg.Definitions())


def make_batch_graph(spec: QuerySpec) -> dg.GraphDefinition:
    """plan -> read -> process -> write -> commit (commit's output is the sink's materialization);
    with fan-out, read yields one `partition` op per state partition (dynamic outputs) and `join`
    collects them before write. Plan's `refused` output (a refusal) goes to commit as well (a fan-in:
    commit runs when either came), which fails with it: one red step, no cascade."""
    ops = make_ops(spec)
    shape = ("plan, read (split per state partition), one op per partition, join, write, commit" if spec.fanout
             else "plan, read, process, write, commit")

    @dg.graph(name=spec.key, description=f"One micro-batch of streaming query {spec.name}: {shape}.")
    def batch_graph():
        b, refused = ops["plan"].alias("plan")()
        if spec.fanout:
            parts = ops["read"].alias("read")(b)
            b = ops["join"].alias("join")(parts.map(ops["partition"].alias("partition")).collect())
        else:
            for step in ("read", "process"):
                b = ops[step].alias(step)(b)
        b = ops["write"].alias("write")(b)
        return ops["commit"].alias("commit")([b, refused])

    return batch_graph


def make_batch_asset(spec: QuerySpec, asset_spec: dg.AssetSpec) -> dg.AssetsDefinition:
    """The sink as a graph-backed asset: one materialization = one micro-batch (Materialize in the
    asset graph, or `dagster asset materialize --select <key>`, runs the next batch)."""
    return dg.AssetsDefinition(node_def=make_batch_graph(spec), keys_by_input_name={},
                               keys_by_output_name={"result": spec.sink_key}, specs=[asset_spec])


def make_batch_job(spec: QuerySpec) -> Any:
    """Job `<q>_batch`: the sink asset's job (its checks are evaluated by the commit op, not as
    steps), or, for a table several queries write, the batch graph as an op job that records the
    table's materialization as an event."""
    desc = (f"One micro-batch of streaming query {spec.name}. Launch with no config (or Materialize "
            f"{spec.sink_key.to_user_string()}) to run the next batch.")
    if spec.shared_sink:
        return make_batch_graph(spec).to_job(name=f"{spec.key}_batch", tags=spec.job_tags, description=desc,
                                             executor_def=resolve_executor(spec.executor))
    return dg.define_asset_job(f"{spec.key}_batch", selection=dg.AssetSelection.assets(spec.sink_key).without_checks(),
                               tags=spec.job_tags, executor_def=resolve_executor(spec.executor), description=desc)


def default_executor(specs: list[QuerySpec]) -> dg.ExecutorDefinition:
    """The location's default executor, which Dagster's own asset job uses (a Materialize from
    the asset graph): the queries' executor when they share one, else in_process."""
    execs = {id(resolve_executor(sp.executor)): resolve_executor(sp.executor) for sp in specs}
    return next(iter(execs.values())) if len(execs) == 1 else dg.in_process_executor


def build_definitions(queries: list[Any], asset_root: str | None = None,
                      retention_days: int | None = None) -> dg.Definitions:
    """Definitions for many queries: each item a writer factory (decorated or not) or a
    (factory, {options}) pair. Asset keys of paths under `asset_root` are relative to it.
    `retention_days`: delete Dagster history older than that daily (retention.py; default off)."""
    check_deployment()               # an unsupported Dagster, or a run coordinator that launches at once: refused
    specs = []
    for q in queries:
        fn, opts = (q if isinstance(q, tuple) else (q, {}))
        opts = {"asset_root": asset_root, **getattr(fn, "__increments_query__", {}), **opts}
        specs.append(make_spec(fn, **opts))
    writers: dict[dg.AssetKey, int] = {}
    for sp in specs:
        writers[sp.sink_key] = writers.get(sp.sink_key, 0) + 1
    for sp in specs:
        sp.shared_sink = writers[sp.sink_key] > 1
        sp.written_sources = {k for k in sp.source_keys() if k in writers}
    if not specs:
        return dg.Definitions()
    parts = [spec_definitions(sp) for sp in specs]
    owner = {sp.sink_key: sp for sp in specs if not sp.shared_sink}
    assets = [make_batch_asset(owner[a.key], a) if a.key in owner else a for a in build_assets(specs)]
    defs = dg.Definitions.merge(dg.Definitions(assets=assets, executor=default_executor(specs)), *parts)
    instigators = {s.name for s in defs.sensors or []} | {s.name for s in defs.schedules or []}
    out = dg.Definitions.merge(defs, make_retention([sp.name for sp in specs], instigators, retention_days))
    preload.start()          # a run's process: the engine's modules import while Dagster starts the run (preload.py)
    return out


def definitions_from_module(module: str) -> dg.Definitions:
    """Every function of `module` decorated with @streaming_query, or the module's QUERIES list;
    the module's ASSET_ROOT (optional) roots the asset keys of its paths."""
    mod = importlib.import_module(module)
    queries = getattr(mod, "QUERIES", None)
    if queries is None:
        queries = [v for v in vars(mod).values() if callable(v) and hasattr(v, "__increments_query__")]
    return build_definitions(list(queries), asset_root=getattr(mod, "ASSET_ROOT", None),
                             retention_days=getattr(mod, "RETENTION_DAYS", None))

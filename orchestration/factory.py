"""Registered queries -> Dagster definitions.

A registered query is a function returning an increments DataStreamWriter, not started
(`frame.write_stream.format(...).checkpoint_location(...).query_name(...).trigger(...)`).
For each one `query_definitions` builds:
- job `<q>_batch`: plan -> read -> process -> write -> commit (one run = one micro-batch), tagged
  increments/query=<q> so the run queue's tag limit keeps one run of the query in flight;
  in-process executor, run retries on (tag dagster/max_retries).
- job `<q>_available_now`: fixes an AvailableNow drain's targets (launch it from the UI);
- sensor `<q>_trigger`: requests the next batch run while none is in flight, when a drain is
  active or (processing_time queries) there is new data or time-based work;
- schedule `<q>_available_now_schedule` (available_now queries): starts a drain on a cron;
- assets: source(s) `source/<q>/<i>` and sink `sink/<q>` (lineage), asset checks on the sink.

    @streaming_query(path="lake/out")
    def my_query():
        return inc.read_stream.files(...).write_stream.format("parquet").checkpoint_location(...)...

    defs = build_definitions([my_query])          # or definitions_from_module("my.module")
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import dagster as dg

from .ops import QUERY_TAG, make_ops

DEFAULT_CRON = "0 * * * *"
DEFAULT_MAX_RETRIES = 3


@dataclass
class QuerySpec:
    writer_factory: Callable[[], Any]
    path: str | None
    name: str
    key: str
    trigger: Any
    num_sources: int
    sink_description: str
    cron_schedule: str = DEFAULT_CRON
    sensor_status: str = "running"
    schedule_status: str = "running"
    max_retries: int = DEFAULT_MAX_RETRIES
    sensor_interval_s: int = 5
    extra_tags: dict[str, str] = field(default_factory=dict)

    @property
    def sink_key(self) -> dg.AssetKey:
        return dg.AssetKey(["sink", self.key])

    def source_keys(self) -> list[dg.AssetKey]:
        return [dg.AssetKey(["source", self.key, str(i)]) for i in range(self.num_sources)]

    @property
    def job_tags(self) -> dict[str, str]:
        return {QUERY_TAG: self.name, "dagster/max_retries": str(self.max_retries),
                "dagster/retry_strategy": "ALL_STEPS", **self.extra_tags}


def streaming_query(path: str | None = None, **options: Any) -> Callable:
    """Decorator registering a writer factory; options go to query_definitions (cron_schedule, ...)."""
    def deco(fn: Callable) -> Callable:
        fn.__increments_query__ = {"path": path, **options}
        return fn
    return deco


def _key(name: str) -> str:
    k = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return k if k and not k[0].isdigit() else f"q_{k}"


def make_spec(writer_factory: Callable[[], Any], path: str | None = None, **options: Any) -> QuerySpec:
    from increments.plan.nodes import SourceNode
    w = writer_factory()
    s = w.settings
    name = s.query_name or s.options.get("query_name")
    if not name:
        raise ValueError(f"{getattr(writer_factory, '__name__', writer_factory)}: a Dagster query needs "
                         ".query_name(...) (it names the job, the assets and the run tag)")
    n_src = sum(1 for node in w.frame.node.walk() if isinstance(node, SourceNode))
    interval_s = max(5, int(s.trigger.interval_ms / 1000)) if s.trigger.kind == "processing_time" else 5
    sink_desc = f"{s.format} {path or s.path or s.options.get('path') or ''}".strip()
    return QuerySpec(writer_factory, path, name, _key(name), s.trigger, n_src, sink_desc,
                     sensor_interval_s=int(options.pop("sensor_interval_s", interval_s)), **options)


def query_definitions(writer_factory: Callable[[], Any], path: str | None = None, **options: Any) -> dg.Definitions:
    """All Dagster definitions for one registered query (see module doc)."""
    from .checks import make_checks
    from .schedules import make_drain_job, make_schedule
    from .sensors import make_sensor
    spec = make_spec(writer_factory, path, **options)
    batch_job = make_batch_job(spec)
    drain_job = make_drain_job(spec)
    sources = [dg.AssetSpec(k, description=f"source {i} of query {spec.name}", group_name="increments",
                            kinds={"increments"}) for i, k in enumerate(spec.source_keys())]
    sink = dg.AssetSpec(spec.sink_key, deps=spec.source_keys(), group_name="increments", kinds={"increments"},
                        description=f"sink of streaming query {spec.name} ({spec.sink_description}); one "
                                    f"materialization per committed micro-batch",
                        metadata={"query": spec.name, "trigger": spec.trigger.description})
    schedules = [make_schedule(spec, drain_job)] if spec.trigger.kind == "available_now" else []
    return dg.Definitions(assets=[*sources, sink], jobs=[batch_job, drain_job], sensors=[make_sensor(spec, batch_job)],
                          schedules=schedules, asset_checks=make_checks(spec))


def make_batch_job(spec: QuerySpec) -> dg.JobDefinition:
    ops = make_ops(spec)

    @dg.job(name=f"{spec.key}_batch", tags=spec.job_tags, executor_def=dg.in_process_executor,
            description=f"One micro-batch of streaming query {spec.name}: plan, read, process, write, commit. "
                        "Launch with no config to run the next batch.")
    def batch_job():
        b = ops["plan"].alias("plan")()
        for step in ("read", "process", "write"):
            b = ops[step].alias(step)(b)
        ops["commit"].alias("commit")(b)

    return batch_job


def build_definitions(queries: list[Any]) -> dg.Definitions:
    """Definitions for many queries: each item a writer factory (decorated or not) or a
    (factory, {options}) pair."""
    parts = []
    for q in queries:
        fn, opts = (q if isinstance(q, tuple) else (q, {}))
        opts = {**getattr(fn, "__increments_query__", {}), **opts}
        parts.append(query_definitions(fn, **opts))
    return dg.Definitions.merge(*parts) if parts else dg.Definitions()


def definitions_from_module(module: str) -> dg.Definitions:
    """Every function of `module` decorated with @streaming_query, or the module's QUERIES list."""
    mod = importlib.import_module(module)
    queries = getattr(mod, "QUERIES", None)
    if queries is None:
        queries = [v for v in vars(mod).values() if callable(v) and hasattr(v, "__increments_query__")]
    return build_definitions(list(queries))

"""What one protocol step hands to the next: typed results, staged as JSON between processes.

Each step returns its result and stages `result.to_json()` under the batch (execution/staging.py);
a later step, possibly in another process or on another machine (the Dagster ops), reads it back
with `load`:

    staged name     class              written by                      read by
    "read"          ReadResult         steps.read_batch                steps.commit_batch
    "process"       ProcessResult      steps.process_batch, or         steps.commit_batch
                                       partitioned.join_partitions
    "write"         WriteResult        steps.write_batch               steps.commit_batch
    "split"         SplitResult        partitioned.split_batch         partitioned.join_partitions
    "process_<p>"   PartitionResult    partitioned.process_partition   partitioned.join_partitions
    ("plan" is the plan's durations, a plain {name: ms} dict: steps.load_plan)

JSON compatibility: `to_json` writes exactly the keys the dict-based steps of earlier releases
staged, in the same flat layout (a source's read metrics beside its num_input_rows, the sink's
extra beside num_output_rows, the batch metrics of a split or partition beside its own fields), and
`from_json` reads that layout. So a batch whose first steps ran on an earlier release is finished
by this one after an upgrade (a resumed Dagster run, a redo), and the other way round. A key
missing from the JSON takes the field's default, as the earlier `.get(key, default)` reads did;
unknown keys are a source's read metrics (SourceRead.metrics) or the sink's extra
(WriteResult.extra), and are ignored elsewhere.

`load` returns None when nothing was staged under the name. commit_batch then uses the empty
result (ReadResult(), ...), as before: a runner that lost the fence may find its staging cleared
by the winner's commit, and must reach the fenced commit insert to be refused as such
(ConcurrentRunError), not fail on the missing file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Self

from ..operators.base import BatchContext, EventTimeStats


class Staging(Protocol):
    def put_json(self, batch_id: int, name: str, body: Any) -> None: ...
    def get_json(self, batch_id: int, name: str, default: Any = None) -> Any: ...


class _Staged:
    """`load` of a result staged whole under its class's NAME."""
    __slots__ = ()
    NAME: str

    @classmethod
    def load(cls, staging: Staging, batch_id: int) -> Self | None:
        d = staging.get_json(batch_id, cls.NAME)
        return None if d is None else cls.from_json(d)


# -- read -------------------------------------------------------------------------------------------
@dataclass(slots=True)
class SourceRead:
    """One source's part of the read step; also its entry in commits[N].extra["sources"] and in
    progress["sources"] (as JSON: num_input_rows and the metrics side by side)."""
    num_input_rows: int = 0                 # rows of its scan after pushed-down filters (rule 3)
    metrics: dict[str, Any] = field(default_factory=dict)   # the source's read_metrics (files, ...)

    def to_json(self) -> dict[str, Any]:
        return {"num_input_rows": self.num_input_rows, **self.metrics}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SourceRead:
        return cls(d.get("num_input_rows", 0), {k: v for k, v in d.items() if k != "num_input_rows"})


@dataclass(slots=True)
class ReadResult(_Staged):
    sources: list[SourceRead] = field(default_factory=list)    # in source index order
    get_batch_ms: int = 0

    NAME = "read"

    @property
    def num_input_rows(self) -> int:
        return sum(s.num_input_rows for s in self.sources)

    def to_json(self) -> dict[str, Any]:
        return {"sources": [s.to_json() for s in self.sources], "get_batch_ms": self.get_batch_ms}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ReadResult:
        return cls([SourceRead.from_json(s) for s in d.get("sources", ())], d.get("get_batch_ms", 0))


# -- process ----------------------------------------------------------------------------------------
@dataclass(slots=True)
class ProcessResult(_Staged):
    """The process step (or the join of its partitions): what commits[N] records of the operators."""
    event_time: dict[str, dict[str, Any]] = field(default_factory=dict)   # {watermark id: EventTimeStats fields}
    state_versions: dict[str, int] = field(default_factory=dict)          # {operator id: N}
    state_tokens: dict[str, list] = field(default_factory=dict)           # {operator id: token per partition}
    next_timers: dict[str, int | None] = field(default_factory=dict)      # {operator id: ms}: processing-time timers
    state_operators: list[dict[str, Any]] = field(default_factory=list)   # progress["state_operators"], as shown
    warnings: list[str] = field(default_factory=list)
    dead_letters: dict[str, int] = field(default_factory=dict)
    static_versions: dict[str, Any] = field(default_factory=dict)
    process_ms: int = 0
    # fanned out (join_partitions): per partition its number, num_input_rows, num_output_rows,
    # num_state_rows and process_ms, for the record; None when the step ran in one piece
    partitions: list[dict[str, int]] | None = None
    # progress["expectations"]: per expectation {name, condition, on_violation, passed, failed}
    expectations: list[dict[str, Any]] = field(default_factory=list)

    NAME = "process"

    def to_json(self) -> dict[str, Any]:
        out = {"event_time": self.event_time, "state_versions": self.state_versions,
               "state_tokens": self.state_tokens, "next_timers": self.next_timers,
               "state_operators": self.state_operators, "warnings": self.warnings,
               "dead_letters": self.dead_letters, "static_versions": self.static_versions,
               "process_ms": self.process_ms}
        if self.partitions is not None:
            out["partitions"] = self.partitions
        if self.expectations:
            out["expectations"] = self.expectations
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProcessResult:
        return cls(d.get("event_time", {}), d.get("state_versions", {}), d.get("state_tokens", {}),
                   d.get("next_timers", {}), d.get("state_operators", []), d.get("warnings", []),
                   d.get("dead_letters", {}), d.get("static_versions", {}), d.get("process_ms", 0),
                   d.get("partitions"), d.get("expectations", []))


# -- write ------------------------------------------------------------------------------------------
_WRITE_KEYS = ("num_output_rows", "sink_version", "skipped_replay", "add_batch_ms")


@dataclass(slots=True)
class WriteResult(_Staged):
    num_output_rows: int = 0
    sink_version: Any = None            # the sink's version after the batch (a Delta version, ...); None: none
    skipped_replay: bool = False        # the sink already held batch N (a redo): nothing written
    add_batch_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)   # the sink's own result fields (SinkResult.extra)

    NAME = "write"

    def to_json(self) -> dict[str, Any]:
        return {"num_output_rows": self.num_output_rows, "sink_version": self.sink_version,
                "skipped_replay": self.skipped_replay, "add_batch_ms": self.add_batch_ms, **self.extra}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WriteResult:
        extra = {k: v for k, v in d.items() if k not in _WRITE_KEYS} if len(d) > len(_WRITE_KEYS) else {}
        return cls(d.get("num_output_rows", 0), d.get("sink_version"), d.get("skipped_replay", False),
                   d.get("add_batch_ms", 0), extra)


# -- the fanned-out process step (execution/partitioned.py) ------------------------------------------
@dataclass(slots=True)
class BatchMetrics:
    """What a BatchContext counted besides state: merged over the split and the partitions as one
    process step would have counted them."""
    event_time: dict[str, dict[str, Any]] = field(default_factory=dict)
    dropped_by_watermark: dict[str, int] = field(default_factory=dict)
    custom_metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    dead_letters: dict[str, int] = field(default_factory=dict)
    static_versions: dict[str, Any] = field(default_factory=dict)
    expectations: dict[str, dict[str, Any]] = field(default_factory=dict)   # BatchContext.expectations

    @classmethod
    def of(cls, ctx: BatchContext) -> BatchMetrics:
        return cls({k: vars(v) for k, v in ctx.event_time.items()}, dict(ctx.dropped_by_watermark),
                   ctx.custom_metrics, list(ctx.warnings), dict(ctx.dead_letters), dict(ctx.static_versions),
                   {k: dict(v) for k, v in ctx.expectations.items()})

    def to_json(self) -> dict[str, Any]:
        out = {"event_time": self.event_time, "dropped_by_watermark": self.dropped_by_watermark,
               "custom_metrics": self.custom_metrics, "warnings": self.warnings,
               "dead_letters": self.dead_letters, "static_versions": self.static_versions}
        if self.expectations:
            out["expectations"] = self.expectations
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BatchMetrics:
        return cls(d.get("event_time", {}), d.get("dropped_by_watermark", {}), d.get("custom_metrics", {}),
                   d.get("warnings", []), d.get("dead_letters", {}), d.get("static_versions", {}),
                   d.get("expectations", {}))

    @classmethod
    def merged(cls, parts: list[BatchMetrics]) -> BatchMetrics:
        """Event times combined, row counts summed, static versions and warnings (once each) united."""
        event_time: dict[str, EventTimeStats] = {}
        out = cls()
        for m in parts:
            for k, v in m.event_time.items():
                st = event_time.setdefault(k, EventTimeStats())
                if v.get("count"):
                    st.add(v["min_ms"], v["max_ms"], v["sum_ms"], v["count"])
            for src, dst in ((m.dropped_by_watermark, out.dropped_by_watermark), (m.dead_letters, out.dead_letters)):
                for k, v in src.items():
                    dst[k] = dst.get(k, 0) + int(v)
            out.static_versions.update(m.static_versions)
            out.warnings += [w for w in m.warnings if w not in out.warnings]
            for name, e in m.expectations.items():        # per expectation: passed and failed summed
                cur = out.expectations.setdefault(name, {**e, "passed": 0, "failed": 0})
                cur["passed"] += int(e.get("passed", 0))
                cur["failed"] += int(e.get("failed", 0))
        out.event_time = {k: vars(v) for k, v in event_time.items()}
        return out


@dataclass(slots=True)
class SplitResult(_Staged):
    """The split after read: rows per state partition (a stateless plan: per row-range slice)."""
    partitions: int
    rows: list[int]
    split_ms: int = 0
    stateless: bool = False
    metrics: BatchMetrics | None = None     # of the stateless subtree below S; None for a stateless plan

    NAME = "split"

    def to_json(self) -> dict[str, Any]:
        if self.stateless:
            return {"partitions": self.partitions, "rows": self.rows, "stateless": True, "split_ms": self.split_ms}
        return {"partitions": self.partitions, "rows": self.rows, "split_ms": self.split_ms,
                **(self.metrics or BatchMetrics()).to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SplitResult:
        stateless = bool(d.get("stateless", False))
        return cls(int(d["partitions"]), list(d["rows"]), int(d.get("split_ms", 0)), stateless,
                   None if stateless else BatchMetrics.from_json(d))


@dataclass(slots=True)
class PartitionResult:
    """State partition p of the process step (staged as "process_<p>")."""
    partition: int
    state_versions: dict[str, int] = field(default_factory=dict)
    state_tokens: dict[str, list] = field(default_factory=dict)      # this partition's at index p
    state_operators: list[dict[str, Any]] = field(default_factory=list)
    num_input_rows: int = 0
    num_output_rows: int = 0
    num_state_rows: int = 0
    process_ms: int = 0
    metrics: BatchMetrics = field(default_factory=BatchMetrics)

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "state_versions": self.state_versions,
                "state_tokens": self.state_tokens, "state_operators": self.state_operators,
                "num_input_rows": self.num_input_rows, "num_output_rows": self.num_output_rows,
                "num_state_rows": self.num_state_rows, "process_ms": self.process_ms, **self.metrics.to_json()}

    def summary(self) -> dict[str, int]:
        """Its entry in ProcessResult.partitions."""
        return {"partition": self.partition, "num_input_rows": self.num_input_rows,
                "num_output_rows": self.num_output_rows, "num_state_rows": self.num_state_rows,
                "process_ms": self.process_ms}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartitionResult:
        return cls(int(d["partition"]), d.get("state_versions", {}), d.get("state_tokens", {}),
                   d.get("state_operators", []), int(d.get("num_input_rows", 0)), int(d.get("num_output_rows", 0)),
                   int(d.get("num_state_rows", 0)), int(d.get("process_ms", 0)), BatchMetrics.from_json(d))

    @staticmethod
    def name(p: int) -> str:
        return f"process_{p}"

    @classmethod
    def load(cls, staging: Staging, batch_id: int, p: int) -> PartitionResult | None:
        d = staging.get_json(batch_id, cls.name(p))
        return None if d is None else cls.from_json(d)

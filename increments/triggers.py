"""Triggers: when the runner plans the next batch.

- ProcessingTime(interval): a batch every interval; a batch that overruns starts the next at once;
  an idle interval (nothing new, no time-based work) runs nothing and writes nothing.
- AvailableNow: fix each source's target at start, run as many batches as the rate limits need,
  one trailing no-data batch when SEMANTICS.md rule 2 asks for it, then stop.
- Once: one batch with everything available, rate limits ignored (as Spark's Trigger.Once).
"""
from __future__ import annotations

from dataclasses import dataclass

from .durations import parse_duration_ms


@dataclass(frozen=True)
class Trigger:
    kind: str              # "processing_time" | "available_now" | "once"
    interval_ms: int = 0

    @classmethod
    def make(cls, processing_time: str | None = None, available_now: bool = False, once: bool = False,
             continuous: str | None = None) -> "Trigger":
        if continuous:
            raise ValueError("continuous triggers are not supported; use processing_time=")
        chosen = [x for x in (processing_time is not None, available_now, once) if x]
        if len(chosen) > 1:
            raise ValueError("trigger: choose one of processing_time=, available_now=True, once=True")
        if available_now:
            return cls("available_now")
        if once:
            return cls("once")
        if processing_time is not None:
            return cls("processing_time", parse_duration_ms(processing_time))
        return cls("processing_time", 0)

    @property
    def description(self) -> str:
        if self.kind == "processing_time":
            return f"ProcessingTime({self.interval_ms} ms)"
        return {"available_now": "AvailableNow", "once": "Once"}[self.kind]

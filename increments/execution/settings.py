"""WriterSettings: what write_stream collected (format, output mode, options, checkpoint, name,
trigger, sink). Its own module so the writer API (and the Dagster definitions, which build writers
to read these settings) does not import the engine: build_runtime (execution/runtime.py) does."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..triggers import Trigger

if TYPE_CHECKING:
    import pyarrow as pa

    from ..sinks.base import Sink


@dataclass
class WriterSettings:
    format: str = "memory"
    output_mode: str = "append"
    options: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    query_name: str | None = None
    trigger: Trigger = field(default_factory=lambda: Trigger("processing_time", 0))
    foreach_batch: Callable[[pa.Table, int], Any] | None = None
    path: str | None = None
    sink: Sink | None = None
    apply_changes: Any = None           # operators.apply_changes.ApplyChangesSpec (write_stream.apply_changes)

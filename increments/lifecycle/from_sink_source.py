"""The changed query's source during `increments migrate --backfill-from-sink` (lifecycle/from_sink.py:
the contract and the plan): SinkBackfillSource stands in for the real source and reads the old
query's table rows of old batch k under old batch k's offsets; backfill_writer puts it in the
changed query's plan.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pyarrow as pa

from ..errors import AnalysisException
from ..plan import nodes as n
from ..sources.base import Source
from .from_sink import SinkBackfill, offset_key


class SinkBackfillSource(Source):
    """The changed query's source during the backfill: the old table's rows of old batch k under
    old batch k's offsets (module doc). Same description and schema as the real source, so the new
    checkpoint's conf names the real source."""
    _per_query: dict[str, Any] = {}

    def __init__(self, real: Source, backfill: SinkBackfill):
        self.real = real
        self.backfill = backfill
        self.format = getattr(real, "format", None)      # the same scan-filter counting as the real source

    @property
    def description(self) -> str:
        return self.real.description

    def schema(self) -> pa.Schema:
        return self.backfill.source_schema

    def open(self, checkpoint: Any, index: int, query_name: str, storage_options: dict | None = None) -> None:
        """Attach, and seed sources/<index>/ of the new checkpoint with a copy of the old checkpoint's
        files of this source (create-only: a resumed backfill keeps what is there)."""
        super().open(checkpoint, index, query_name, storage_options)
        old = self.backfill.old_checkpoint.child("sources", str(index))
        own = self.own_files()
        for o in old.list(""):
            if not own.exists(o.name):
                try:
                    own.write_bytes(o.name, old.read_bytes(o.name), create_only=True)
                except FileExistsError:
                    pass

    def initial_offset(self) -> Any:
        return self.backfill.positions[0]

    def _position(self, offset: Any) -> int:
        k = self.backfill.at.get(offset_key(offset))
        if k is None:
            raise AnalysisException(self.fail(
                f"the new checkpoint's log stands at offsets {offset_key(offset)}, which are not the end of any batch "
                f"of the old query ({self.backfill.old_id}); the new checkpoint holds another query's batches: "
                "migrate to a new, empty checkpoint"))
        return k

    def latest_offset(self, start: Any, limited: bool = True) -> Any:
        k = self._position(start)
        last = len(self.backfill.positions) - 1
        if k == last:
            return start
        return self.backfill.positions[k + 1 if limited else last]

    def has_new_data(self, start: Any, end: Any) -> bool:
        return offset_key(start) != offset_key(end)

    def read(self, start: Any, end: Any) -> pa.Table:
        a, b = self._position(start), self._position(end)
        ids = [i for k in range(a + 1, b + 1) for i in self.backfill.batches_at.get(k, [])]
        return self.backfill.read_batches(ids)

    def done(self, end: Any) -> bool:
        return offset_key(end) == offset_key(self.backfill.last)


def replace_source(node: Any, new: Source) -> Any:
    """The logical plan with its (single) source replaced by `new`."""
    if isinstance(node, n.SourceNode):
        return dataclasses.replace(node, source=new)
    changes = {f.name: replace_source(getattr(node, f.name), new) for f in dataclasses.fields(node)
               if isinstance(getattr(node, f.name), n.Node)}
    return dataclasses.replace(node, **changes) if changes else node


def backfill_writer(writer: Any, bf: SinkBackfill) -> Any:
    """The changed query's writer with its source replaced by the SinkBackfillSource."""
    real = _find_source(writer.frame.node)
    frame = copy.copy(writer.frame)
    frame._node = replace_source(writer.frame.node, SinkBackfillSource(real, bf))
    w = writer._copy()
    w._frame = frame
    return w


def _find_source(node: Any) -> Source:
    if isinstance(node, n.SourceNode):
        return node.source
    for f in dataclasses.fields(node):
        child = getattr(node, f.name)
        if isinstance(child, n.Node):
            return _find_source(child)
    raise AnalysisException("the query has no streaming source")

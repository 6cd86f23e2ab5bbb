"""format("parquet"): one data object per batch (and attempt), published by a manifest entry.

Layout under the sink path (a local path or a URL: s3://, gs://, az://, abfss://, file://; an
unknown scheme is refused at open()): ``batch_id=<N>/part-0-<token>.parquet`` and
``_manifest/<N>.<query id>.json`` naming the batch's files. Both are written create-only, the data
object first under a name unique to the attempt (the token), then the manifest entry. Earlier
releases named the entry ``_manifest/<N>.json`` (its body names the query id); those are read
as before.

Recovery rule: a batch is published when its manifest entry exists, and then never changes.
Idempotence is per (query id, batch id): add_batch(N) finds this query's entry for N already
there (``<N>.<query id>.json``, or an earlier release's ``<N>.json`` whose body names this query
id or none) -> the batch is a replay (a redo after a crash between the manifest and commits[N];
the rows are the same) and nothing is written. A path that already holds another query's batches
(a new checkpoint writing to an old output path) gets this query's batches beside them, none
skipped; the first start warns, naming the other query ids (foreign_output), and readers read
both. An attempt that
loses the race for the manifest (a concurrent runner published N first) deletes its own data
object (no one references it) and reports a replay. Readers (`inc.read.parquet_sink(path)`) read
only the files manifests name, so a crash mid-write leaves an unreferenced object, never a visible
partial batch. No rename and no lock: this works on object stores. Append mode only, as Spark's
file sink. storage_options: the sink's own (`.option("storage_options", ...)`) over the query's.
"""
from __future__ import annotations

import io
import json
import os
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .. import storage
from ..storage import Location
from .base import Sink, SinkContext, SinkResult


class ParquetSink(Sink):
    supported_modes = ("append",)

    def __init__(self, path: str, options: dict[str, Any] | None = None):
        if not path:
            raise ValueError("format('parquet') needs a path: .start('out/dir')")
        path = os.fspath(path)
        self.path = path.rstrip("/") if storage.scheme_of(path) else os.path.abspath(path)
        self.own_storage_options = dict((options or {}).get("storage_options") or {})
        storage.remember_secrets(self.own_storage_options)
        self.loc: Location | None = None

    @property
    def description(self) -> str:
        return f"FileSink[{storage.redact_url(self.path)}]"

    def open(self, ctx: SinkContext) -> None:
        storage.check_scheme(self.path, "format('parquet') path")
        super().open(ctx)
        self.loc = storage.location(self.path, {**(getattr(ctx, "storage_options", None) or {}),
                                                **self.own_storage_options})

    def _writers(self) -> dict[str, int]:
        """query id -> batches published, over every manifest entry ('' for an old entry naming none)."""
        assert self.loc is not None, "open() the sink first"
        out: dict[str, int] = {}
        for o in self.loc.list("_manifest/"):
            qid = _entry_query(self.loc, o.name)
            if qid is not None:
                out[qid] = out.get(qid, 0) + 1
        return out

    def holds_query(self, query_id: str) -> bool | None:
        """True when a published batch's manifest names this query id."""
        return query_id in self._writers()

    def foreign_output(self, query_id: str) -> str | None:
        others = {q: n for q, n in self._writers().items() if q != query_id}
        if not others:
            return None
        named = ", ".join(f"query id {q} ({n} batches)" if q else f"{n} batches of an unnamed query"
                          for q, n in sorted(others.items()))
        return (f"{self.description} already holds the output of {named}. This query (id {query_id}) publishes "
                f"its own batches beside them (manifest entries keyed by query id and batch id: none of its batches "
                f"is skipped), and inc.read.parquet_sink reads both. Write to a new path to keep them apart.")

    def _published(self, batch_id: int) -> bool:
        """Is this query's batch N published (its entry, or an earlier release's N.json of this query)?"""
        loc = self.loc
        assert loc is not None
        if loc.exists(f"_manifest/{batch_id}.{self.ctx.query_id}.json"):
            return True
        try:
            old = json.loads(loc.read_bytes(f"_manifest/{batch_id}.json"))
        except FileNotFoundError:
            return False
        return old.get("query_id") in (None, self.ctx.query_id)

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        """See the module doc: skip a published batch, else data object then manifest, create-only."""
        loc = self.loc
        assert loc is not None, "open() the sink first"
        manifest = f"_manifest/{batch_id}.{self.ctx.query_id}.json"
        if self._published(batch_id):
            return SinkResult(0, version=batch_id, skipped_replay=True)
        part = f"part-0-{uuid.uuid4().hex}.parquet"
        data = f"batch_id={batch_id}/{part}"
        buf = pa.BufferOutputStream()        # the same bytes as through io.BytesIO, without a Python file object
        pq.write_table(table, buf)
        loc.write_bytes(data, buf.getvalue().to_pybytes(), create_only=True)
        body = {"batch_id": batch_id, "files": [part], "num_rows": table.num_rows, "query_id": self.ctx.query_id,
                "query_name": self.ctx.query_name}      # for a reading query's lineage (execution/lineage.py)
        try:
            loc.write_bytes(manifest, json.dumps(body, sort_keys=True).encode(), create_only=True)
        except FileExistsError:
            loc.delete(data)
            return SinkResult(0, version=batch_id, skipped_replay=True)
        return SinkResult(table.num_rows, version=batch_id)


def _entry_query(loc: Location, name: str) -> str | None:
    """The query id of manifest entry `name` (`<N>.<query id>.json`, or an old `<N>.json` naming it
    in its body: '' when it names none); None: not a manifest entry."""
    base = name.rsplit("/", 1)[-1]
    if not base.endswith(".json"):
        return None
    head, _, qid = base[:-5].partition(".")
    if not head.isdigit():
        return None
    return qid if qid else (json.loads(loc.read_bytes(name)).get("query_id") or "")


def read_parquet_sink(path: str, storage_options: dict[str, Any] | None = None) -> pa.Table:
    """Every published batch of a parquet sink, in batch order (unpublished writes are invisible)."""
    loc = storage.location(os.fspath(path), storage_options)
    entries = []
    for o in loc.list("_manifest/"):
        if o.name.endswith(".json"):
            entries.append(json.loads(loc.read_bytes(o.name)))
    entries.sort(key=lambda e: (int(e["batch_id"]), e.get("query_id") or ""))
    tables = []
    for e in entries:
        for f in e["files"]:
            name = f"batch_id={e['batch_id']}/{f}"
            local = loc.local_path(name)
            tables.append(pq.read_table(local) if local is not None else pq.read_table(io.BytesIO(loc.read_bytes(name))))
    return pa.concat_tables(tables) if tables else pa.table({})

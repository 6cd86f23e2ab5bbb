"""format("parquet"): one directory per batch id, published atomically, plus a manifest.

Layout under the sink path: `batch_id=<N>/part-0.parquet` and `_manifest/<N>.json`. A batch is
written into `_tmp-<N>-<uuid>/` and renamed into place; the manifest entry is written last.
Readers (`inc.read.parquet_sink(path)`) see only batches with a manifest entry, so a crash mid-
write is never visible; a replayed batch replaces its directory (same rows, same id). Append
mode only, as Spark's file sink.
"""
from __future__ import annotations

import glob
import os
import shutil
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from ..checkpoint.metadata import atomic_write_json, read_json
from .base import Sink, SinkResult


class ParquetSink(Sink):
    supported_modes = ("append",)

    def __init__(self, path: str):
        if not path:
            raise ValueError("format('parquet') needs a path: .start('out/dir')")
        self.path = os.path.abspath(path)

    @property
    def description(self) -> str:
        return f"FileSink[{self.path}]"

    def add_batch(self, batch_id: int, table: pa.Table) -> SinkResult:
        final = os.path.join(self.path, f"batch_id={batch_id}")
        manifest = os.path.join(self.path, "_manifest", f"{batch_id}.json")
        replay = os.path.exists(manifest)
        tmp = os.path.join(self.path, f"_tmp-{batch_id}-{uuid.uuid4().hex}")
        os.makedirs(tmp)
        pq.write_table(table, os.path.join(tmp, "part-0.parquet"))
        if os.path.exists(final):
            shutil.rmtree(final)
        os.replace(tmp, final)
        atomic_write_json(manifest, {"batch_id": batch_id, "files": ["part-0.parquet"], "num_rows": table.num_rows,
                                     "query_id": self.ctx.query_id})
        for stale in glob.glob(os.path.join(self.path, f"_tmp-{batch_id}-*")):
            shutil.rmtree(stale, ignore_errors=True)
        return SinkResult(table.num_rows, version=batch_id, skipped_replay=replay)


def read_parquet_sink(path: str) -> pa.Table:
    """Every committed batch of a parquet sink, in batch order (partial writes are invisible)."""
    entries = sorted((read_json(p) for p in glob.glob(os.path.join(path, "_manifest", "*.json"))),
                     key=lambda e: e["batch_id"])
    tables = [pq.read_table(os.path.join(path, f"batch_id={e['batch_id']}", f)) for e in entries for f in e["files"]]
    return pa.concat_tables(tables) if tables else pa.table({})

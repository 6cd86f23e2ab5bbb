"""Maintenance of an Iceberg table a streaming sink writes (one small file per batch): compaction
and snapshot expiry, safe while the query runs. orchestration/maintenance.py runs it as the
query's `<q>_compact` job, beside the Delta sink's optimize + vacuum.

    compact:  per partition, the data files below half the target size (at least 2 of them) are
              read and rewritten as files of the target size (the table's
              write.target-file-size-bytes, or `target_size`), in ONE snapshot whose operation is
              REPLACE (rows unchanged: Iceberg streaming readers, ours included, skip it) and whose
              summary carries increments.maintenance=compact. The sink's marker property is left
              as it is, so exactly-once survives compaction; a concurrent sink commit is retried
              by pyiceberg on top of it (appends never conflict with a replace).
    expire:   snapshots older than `retention_ms` are expired (the current one is always kept), then
              the files only they referenced (data files, manifests, manifest lists) are deleted.
              A stream (read_stream.iceberg) that has not yet read an expired snapshot fails,
              naming it: keep the retention above the slowest reader's lag.
"""
from __future__ import annotations

import datetime as dt
import time
from typing import Any

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import TableProperties

from . import iceberg_table as I

DEFAULT_TARGET = 128 * 1024 * 1024


def _reachable(t: Any, snapshots: list[Any]) -> set[str]:
    """Every file path (manifest lists, manifests, data files) the given snapshots reference."""
    out: set[str] = set()
    for s in snapshots:
        out.add(s.manifest_list)
        for m in s.manifests(t.io):
            out.add(m.manifest_path)
            out.update(e.data_file.file_path for e in m.fetch_manifest_entry(t.io, discard_deleted=True))
    return out


def compact(t: Any, target_size: int | None = None) -> dict[str, int]:
    """Rewrite the small files of each partition (module doc); returns files removed and added."""
    target = int(target_size or t.properties.get(TableProperties.WRITE_TARGET_FILE_SIZE_BYTES) or DEFAULT_TARGET)
    if t.current_snapshot() is None:
        return {"files_removed": 0, "files_added": 0}
    groups: dict[tuple, list[Any]] = {}
    for task in t.scan().plan_files():
        f = task.file
        if f.file_size_in_bytes < target // 2 and not task.delete_files:
            groups.setdefault((f.spec_id, repr(f.partition)), []).append(task)
    groups = {k: v for k, v in groups.items() if len(v) >= 2}
    removed = added = 0
    if not groups:
        return {"files_removed": 0, "files_added": 0}
    with t.transaction() as tx:
        with I.replace_files(tx, t, {"increments.maintenance": "compact"}) as snap:
            for tasks in groups.values():
                rows = ArrowScan(table_metadata=t.metadata, io=t.io, projected_schema=t.schema(),
                                 row_filter=AlwaysTrue()).to_table(tasks=tasks)
                for task in tasks:
                    snap.delete_data_file(task.file)
                    removed += 1
                for f in I.write_files(tx, t, rows):
                    snap.append_data_file(f)
                    added += 1
    return {"files_removed": removed, "files_added": added}


def expire(t: Any, retention_ms: int) -> dict[str, int]:
    """Expire snapshots older than the retention and delete the files only they referenced."""
    cutoff = int(time.time() * 1000) - int(retention_ms)
    current = t.current_snapshot()
    old = [s for s in t.snapshots() if s.timestamp_ms < cutoff and (current is None or s.snapshot_id != current.snapshot_id)]
    if not old:
        return {"snapshots_expired": 0, "files_deleted": 0}
    before = _reachable(t, t.snapshots())
    t.maintenance.expire_snapshots().older_than(dt.datetime.fromtimestamp(cutoff / 1000, dt.timezone.utc)).commit()
    t = t.refresh()
    gone = before - _reachable(t, t.snapshots())
    for path in sorted(gone):
        try:
            t.io.delete(path)
        except FileNotFoundError:
            pass
    return {"snapshots_expired": len(old), "files_deleted": len(gone)}


def maintain(table: str, catalog: dict[str, Any], storage_options: dict[str, Any] | None = None,
             target_size: int | None = None, retention_ms: int = 7 * 24 * 3600 * 1000) -> dict[str, Any]:
    """compact then expire the table (module doc); returns the metrics the maintenance job records."""
    ns, name = I.identifier(table, "iceberg maintenance")
    props = I.catalog_properties(catalog, None, storage_options)
    t = I.load_catalog(props, f"iceberg maintenance of {table}").load_table((*ns, name))
    files_before = len(list(t.scan().plan_files())) if t.current_snapshot() is not None else 0
    c = compact(t, target_size)
    t = t.refresh()
    e = expire(t, retention_ms)
    t = t.refresh()
    snap = t.current_snapshot()
    return {"files_before": files_before, **c,
            "files_after": len(list(t.scan().plan_files())) if snap is not None else 0, **e,
            "snapshot_id": int(snap.snapshot_id) if snap is not None else None,
            "retention_hours": round(retention_ms / 3_600_000, 3)}


"""Checkpoint file helpers shared by the providers.

Per-store directory ``<checkpoint>/state/<operator>/<partition>/`` holds:

* ``<v>.delta`` (memory) / ``<v>.changelog`` (rocksdb): the batch's puts and deletes, an Arrow
  IPC file with columns key (binary) and value (binary, null = delete); its schema metadata
  holds ``{"version", "token", "rows"}`` (rows = exact row count after the version).
* ``<v>.snapshot``: a full copy of version v (memory: an Arrow IPC file of all rows;
  rocksdb: a directory holding a RocksDB checkpoint plus ``_meta.json``).
* ``.tmp-*``: in-flight writes; ignored by readers and removed by the next commit.

Every file or directory is written under a ``.tmp-`` name and renamed into place, so a
version is either absent or complete.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import uuid

import pyarrow as pa

_NAME = re.compile(r"^(\d+)\.(delta|changelog|snapshot)$")
_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary())])


def store_dir(checkpoint_dir: str, operator: str, partition: int) -> str:
    return os.path.join(checkpoint_dir, "state", operator, str(partition))


def new_token() -> str:
    return uuid.uuid4().hex


def tmp_path(directory: str, name: str) -> str:
    return os.path.join(directory, f".tmp-{name}-{uuid.uuid4().hex[:8]}")


def replace(src: str, dst: str) -> None:
    """The commit point of a file: atomic rename (a separate function so tests can crash here)."""
    os.replace(src, dst)


def fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def list_versions(directory: str) -> dict[str, set[int]]:
    """{"delta"|"changelog"|"snapshot": {versions}} of the complete files in ``directory``."""
    out: dict[str, set[int]] = {"delta": set(), "changelog": set(), "snapshot": set()}
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return out
    for n in names:
        m = _NAME.match(n)
        if m:
            out[m.group(2)].add(int(m.group(1)))
    return out


def remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def remove_tmp(directory: str) -> None:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for n in names:
        if n.startswith(".tmp-"):
            remove(os.path.join(directory, n))


def write_rows(path: str, keys: list[bytes], values: list, meta: dict) -> None:
    """Atomically write an Arrow IPC file of (key, value) rows with JSON metadata."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = tmp_path(directory, os.path.basename(path))
    table = pa.Table.from_arrays(
        [pa.array(keys, pa.binary()), pa.array(values, pa.binary())],
        schema=_SCHEMA.with_metadata({"increments": json.dumps(meta)}))
    with pa.OSFile(tmp, "wb") as f:
        with pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table, max_chunksize=1 << 20)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    replace(tmp, path)
    fsync_dir(directory)


def read_meta(path: str) -> dict:
    """The metadata of a rows file (reads only the footer/schema)."""
    with pa.memory_map(path) as src:
        md = pa.ipc.open_file(src).schema.metadata or {}
    return json.loads(md[b"increments"])


def read_rows(path: str) -> tuple[dict, list[bytes], list]:
    with pa.memory_map(path) as src:
        reader = pa.ipc.open_file(src)
        table = reader.read_all()
    meta = json.loads(table.schema.metadata[b"increments"])
    return meta, table.column("key").to_pylist(), table.column("value").to_pylist()


def write_json(path: str, obj) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = tmp_path(directory, os.path.basename(path))
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    replace(tmp, path)


def plan_chain(versions: dict[str, set[int]], target: int, log_kind: str) -> tuple[int, list[int]]:
    """Pick how to rebuild ``target``: (snapshot version or -1 for empty, logs to replay).

    Uses the newest snapshot s <= target such that logs s+1..target all exist.
    Raises LookupError when no such chain exists.
    """
    logs = versions[log_kind]
    snaps = sorted((s for s in versions["snapshot"] if s <= target), reverse=True) + [-1]
    for s in snaps:
        need = range(s + 1, target + 1)
        if all(v in logs for v in need):
            return s, list(need)
    raise LookupError(f"no snapshot+{log_kind} chain reaches version {target} "
                      f"(snapshots {sorted(versions['snapshot'])}, {log_kind}s {sorted(logs)})")


def cleanup_plan(versions: dict[str, set[int]], latest: int, retention: int) -> int:
    """Files of versions below the returned bound may be deleted: the newest snapshot at or
    below the oldest retained version (latest - retention + 1); -1 when nothing may go."""
    oldest = latest - retention + 1
    snaps = [s for s in versions["snapshot"] if s <= oldest]
    return max(snaps) if snaps else -1

"""The checkpoint directory's metadata: the query id (stable from the first start) and the conf
fixed at the first run (state provider, state partitions, changelog checkpointing, the plan's
stateful operators). A restart that asks for something else fails before any batch runs.

Layout: <checkpoint>/metadata.json, <checkpoint>/conf.json, <checkpoint>/sources/<i>/,
<checkpoint>/state/<operator>/<partition>/, <checkpoint>/staging/<batch>/ (between steps).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ..errors import IncompatibleCheckpointError


def _durable_temp(directory: str, body: Any) -> str:
    """Write JSON to a new temp file in `directory`, flushed to disk; return its path."""
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(body, f, sort_keys=True, indent=1)
        f.flush()
        os.fsync(f.fileno())
    return tmp


def atomic_write_json(path: str, body: Any) -> None:
    """Write JSON to path via a temp file and rename, so readers never see a partial file."""
    os.replace(_durable_temp(os.path.dirname(path), body), path)


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def _create_once(path: str, body: Any) -> None:
    """Create `path` with `body` unless it exists; two starters racing agree on one file (link is atomic)."""
    tmp = _durable_temp(os.path.dirname(path), body)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


@dataclass
class CheckpointMetadata:
    location: str
    query_id: str
    created_at_ms: int
    conf: dict[str, Any]

    @classmethod
    def open(cls, location: str, name: str | None, conf: dict[str, Any]) -> "CheckpointMetadata":
        """Create the checkpoint at first start, or check `conf` against the one fixed then.

        Keys of the fixed conf whose value differs raise IncompatibleCheckpointError naming both
        values; keys the checkpoint does not know yet (added by a newer release) are recorded.
        """
        location = os.path.abspath(location)
        meta_path = os.path.join(location, "metadata.json")
        conf_path = os.path.join(location, "conf.json")
        if not os.path.exists(meta_path):
            _create_once(meta_path, {"id": str(uuid.uuid4()), "name": name, "created_at_ms": int(time.time() * 1000)})
        meta = read_json(meta_path)
        fixed = read_json(conf_path) if os.path.exists(conf_path) else {}
        conf = json.loads(json.dumps(conf))  # compare as stored (tuples -> lists)
        changed = [(k, fixed[k], v) for k, v in conf.items() if k in fixed and fixed[k] != v]
        if changed:
            what = "; ".join(f"{k}: checkpoint has {old!r}, this start asks for {new!r}" for k, old, new in changed)
            raise IncompatibleCheckpointError(
                f"query {name or meta['id']!r}: the checkpoint at {location} was started with a different "
                f"configuration ({what}). These are fixed at the first run. Keep the original values, or start "
                f"the changed query on a new checkpoint location and backfill it from the sources.")
        if any(k not in fixed for k in conf):
            atomic_write_json(conf_path, {**conf, **fixed})
        return cls(location, meta["id"], meta["created_at_ms"], {**conf, **fixed})

    def path(self, *parts: str) -> str:
        return os.path.join(self.location, *parts)

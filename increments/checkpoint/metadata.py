"""The checkpoint's metadata: the query id (stable from the first start) and the conf fixed at
the first run (state provider, state partitions, changelog checkpointing, the plan's stateful
operators). A restart that asks for something else fails before any batch runs.

The checkpoint is a Location (a local directory or an object-store prefix). Layout:
<checkpoint>/metadata.json, <checkpoint>/conf.json, <checkpoint>/sources/<i>/,
<checkpoint>/state/<operator>/<partition>/, <checkpoint>/staging/<batch>/<run id>/ (between steps).
The local helpers atomic_write_json / read_json below serve the sinks' local bookkeeping.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ..errors import IncompatibleCheckpointError
from ..storage import Location, location as make_location


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


@dataclass
class CheckpointMetadata:
    location: Location
    query_id: str
    created_at_ms: int
    conf: dict[str, Any]

    @classmethod
    def open(cls, location: Location | str, name: str | None, conf: dict[str, Any]) -> "CheckpointMetadata":
        """Create the checkpoint at first start, or check `conf` against the one fixed then.

        metadata.json and the first conf.json are written create-only (a conditional put on object
        stores, a hard link on local disk): two starters racing on a new checkpoint agree on the
        query id and conf that landed first (a starter whose conf differs then fails as below).
        Keys of the fixed conf whose value differs raise IncompatibleCheckpointError naming both
        values; keys the checkpoint does not know yet (added by a newer release) are recorded.
        """
        loc = make_location(location)
        meta = read_metadata(loc) or create_metadata(loc, name)    # no create-only write (an fsync) when it exists
        conf = json.loads(json.dumps(conf))  # compare as stored (tuples -> lists)
        for _ in range(2):
            fixed = _read_conf(loc)
            check_conf(loc, name or meta["id"], fixed, conf)
            if all(k in fixed for k in conf):
                break
            try:    # the first start creates conf.json create-only: of two first starters, one conf wins
                loc.write_json("conf.json", {**conf, **fixed}, create_only=not fixed)
                break
            except FileExistsError:
                continue        # another starter fixed it first: check against theirs
        stored = {**conf, **fixed}
        if stored.get(INFORMATIONAL) != conf.get(INFORMATIONAL):   # the UDFs of this start (not fixed)
            stored = {k: v for k, v in stored.items() if k != INFORMATIONAL}
            if conf.get(INFORMATIONAL):
                stored[INFORMATIONAL] = conf[INFORMATIONAL]
            loc.write_json("conf.json", stored)
        return cls(loc, meta["id"], meta["created_at_ms"], stored)


#: the conf key of the query's Python functions (UDFs, map_in_*: increments/udf.py): recorded at
#: every start that changes it, never fixed (a stateless step may change); `increments check`
#: names what changed since the last start
INFORMATIONAL = "udfs"


def create_metadata(loc: Location, name: str | None, query_id: str | None = None,
                    extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """metadata.json, written create-only with a new query id (or `query_id`) when there is none."""
    try:
        loc.write_json("metadata.json", {"id": query_id or str(uuid.uuid4()), "name": name,
                                         "created_at_ms": int(time.time() * 1000), **(extra or {})},
                       create_only=True)
    except FileExistsError:
        pass
    meta = read_metadata(loc)
    assert meta is not None
    return meta


_FILE_SOURCE = re.compile(r"^FileStreamSource\[(.*)\]$")


def upgraded_conf(fixed: dict[str, Any]) -> dict[str, Any]:
    """The fixed conf as this release writes it, for comparison: a file source's path recorded as
    given by an earlier release (relative, "./in", a trailing slash) is made absolute and normalized
    (relative to the working directory of this start) as FileSource records it now. conf.json is
    not rewritten."""
    plan = fixed.get("plan")
    if not isinstance(plan, dict) or not isinstance(plan.get("sources"), list):
        return fixed
    from ..sources.files import normalized_path     # noqa: PLC0415 - checkpoint/ is below sources/
    sources = []
    for s in plan["sources"]:
        m = _FILE_SOURCE.match(s) if isinstance(s, str) else None
        sources.append(f"FileStreamSource[{normalized_path(m.group(1))}]" if m else s)
    return {**fixed, "plan": {**plan, "sources": sources}}


def check_conf(loc: Location, who: str, fixed: dict[str, Any], conf: dict[str, Any]) -> None:
    """IncompatibleCheckpointError when a key of `conf` has another value in the fixed conf; the
    plan fingerprint ("plan") is compared part by part, naming what differs (the fixed conf as
    upgraded_conf reads it)."""
    fixed = upgraded_conf(fixed)
    changed = [(k, fixed[k], v) for k, v in conf.items() if k in fixed and fixed[k] != v and k != INFORMATIONAL]
    if not changed:
        return
    parts = []
    for k, old, new in changed:
        if k == "plan" and isinstance(old, dict) and isinstance(new, dict):
            parts += [f"{part}: checkpoint has {old.get(part)!r}, this start has {new.get(part)!r}"
                      for part in sorted(set(old) | set(new)) if old.get(part) != new.get(part)]
        else:
            parts.append(f"{k}: checkpoint has {old!r}, this start asks for {new!r}")
    raise IncompatibleCheckpointError(
        f"query {who!r}: the checkpoint at {loc.url} was started with a different query or configuration "
        f"({'; '.join(parts)}). The sources, stateful operators and their keys, the sink, the state provider and "
        f"the number of state partitions are fixed at the first run. Keep the original query and values, or start "
        f"the changed query on a new checkpoint location and backfill it from the sources."
        + (f" To change only the number of state partitions, stop the query and run `increments repartition "
           f"{loc.url} --partitions {conf['state_partitions']}` (it rewrites the state), then start it again."
           if [k for k, _, _ in changed] == ["state_partitions"] else ""))


def _read_json_file(loc: Location, name: str, what: str) -> Any:
    """The JSON of `name` (FileNotFoundError when absent); a file that is not JSON fails naming it."""
    data = loc.read_bytes(name)
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise IncompatibleCheckpointError(
            f"{loc.join(name)} ({what}) is not valid JSON ({e}); it was damaged or written by something else. "
            f"Restore it from a backup of the checkpoint, or start the query on a new checkpoint location.") from None


def _read_conf(loc: Location) -> dict[str, Any]:
    try:
        return _read_json_file(loc, "conf.json", "the checkpoint's fixed configuration")
    except FileNotFoundError:
        return {}


def read_metadata(location: Location | str) -> dict[str, Any] | None:
    """The checkpoint's metadata.json (id, name, created_at_ms), or None when there is none."""
    loc = make_location(location)
    try:
        meta = _read_json_file(loc, "metadata.json", "the query id")
    except FileNotFoundError:
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("id"), str):
        raise IncompatibleCheckpointError(
            f"{loc.join('metadata.json')} holds no query id ({{\"id\": ...}}); restore it from a backup of the "
            "checkpoint, or start the query on a new checkpoint location.")
    return meta

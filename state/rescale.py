"""Writing a state version directly, for `increments repartition` (increments/checkpoint/repartition.py).

`write_snapshot(provider, checkpoint, operator, partition, version, keys, values)` writes version
`version` of (operator, partition) as a full snapshot under a fresh token (parent ""), create-only,
in the provider's own format (state.files): memory -> one ``<v>.<token>.snapshot`` Arrow file;
rocksdb -> a RocksDB checkpoint under ``<v>.<token>.snapshot/`` with ``_meta.json`` last. The
version is loadable by that token only: nothing already there is overwritten, so until the commit
log names the new token every reader still gets the old one.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from . import files


def write_snapshot(provider_name: str, checkpoint, operator: str, partition: int, version: int,
                   keys: list[bytes], values: list[bytes]) -> str:
    """Write the snapshot; returns its token (see module doc)."""
    order = sorted(range(len(keys)), key=keys.__getitem__)
    keys, values = [keys[i] for i in order], [values[i] for i in order]
    loc = checkpoint.child("state", operator, str(partition))
    token = files.new_token(len(keys))
    meta = {"version": version, "token": token, "parent": "", "rows": len(keys)}
    if provider_name == "memory":
        files.put(loc, files.snapshot_name(version, token), files.encode_rows(keys, values, meta))
        return token
    from .rocksdb_snapshots import local_checkpoint, upload_snapshot  # noqa: PLC0415 - rocksdict: the rocksdb branch only
    from .working import Working  # noqa: PLC0415 - rocksdict: the rocksdb branch only
    tmp = tempfile.mkdtemp(prefix="increments-rescale-")
    try:
        w = Working(os.path.join(tmp, "db"))
        try:
            w.write(keys, values, version, token, len(keys), {version: token})
            local = local_checkpoint(w, version)
        finally:
            w.close()
        upload_snapshot(local, loc, meta)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return token


def read_version(provider, operator: str, partition: int, version: int, token: str | None) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of (operator, partition) at (version, token)."""
    store = provider.open(operator, partition, version, token)
    try:
        return list(store.iter_all())
    finally:
        store.close()

"""Data handed from one protocol step to the next.

MemoryStaging keeps it in the process (the local runner). DiskStaging writes Arrow IPC and JSON
under <checkpoint>/staging/<batch>/ so each step can run in its own process (Dagster ops). A redo
of batch N rewrites its staging from the read step on, so stale files never leak into a batch.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from ..checkpoint.metadata import atomic_write_json


class MemoryStaging:
    def __init__(self):
        self._items: dict[tuple[int, str], Any] = {}

    def put_table(self, batch_id: int, name: str, table: pa.Table) -> None:
        self._items[(batch_id, name)] = table

    def get_table(self, batch_id: int, name: str) -> pa.Table:
        return self._items[(batch_id, name)]

    def put_json(self, batch_id: int, name: str, body: Any) -> None:
        self._items[(batch_id, name)] = json.loads(json.dumps(body))

    def get_json(self, batch_id: int, name: str, default: Any = None) -> Any:
        return self._items.get((batch_id, name), default)

    def clear(self, batch_id: int) -> None:
        for k in [k for k in self._items if k[0] <= batch_id]:
            del self._items[k]


class DiskStaging:
    def __init__(self, root: str):
        self.root = root

    def _dir(self, batch_id: int) -> str:
        d = os.path.join(self.root, str(batch_id))
        os.makedirs(d, exist_ok=True)
        return d

    def put_table(self, batch_id: int, name: str, table: pa.Table) -> None:
        d = self._dir(batch_id)
        tmp = os.path.join(d, f".{name}.arrow.tmp")
        with pa.OSFile(tmp, "wb") as f, ipc.new_file(f, table.schema) as w:
            w.write_table(table)
        os.replace(tmp, os.path.join(d, f"{name}.arrow"))

    def get_table(self, batch_id: int, name: str) -> pa.Table:
        path = os.path.join(self.root, str(batch_id), f"{name}.arrow")
        with pa.memory_map(path) as src:
            return ipc.open_file(src).read_all()

    def put_json(self, batch_id: int, name: str, body: Any) -> None:
        atomic_write_json(os.path.join(self._dir(batch_id), f"{name}.json"), body)

    def get_json(self, batch_id: int, name: str, default: Any = None) -> Any:
        path = os.path.join(self.root, str(batch_id), f"{name}.json")
        if not os.path.exists(path):
            return default
        with open(path) as f:
            return json.load(f)

    def clear(self, batch_id: int) -> None:
        if not os.path.isdir(self.root):
            return
        for name in os.listdir(self.root):
            if name.isdigit() and int(name) <= batch_id:
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

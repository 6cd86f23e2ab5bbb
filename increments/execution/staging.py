"""Data handed from one protocol step to the next.

MemoryStaging keeps it in the process (the local runner). DiskStaging writes Arrow IPC and JSON
under the checkpoint (a local directory or an object-store prefix) so that each step can run in
its own process, on any machine (Dagster ops):

    <checkpoint>/staging/<batch id>/<run id>/<name>.arrow | <name>.json

The tables are the rows between steps (input_<i>, output; fanned out: slice_<p>, output_<p>); the
JSON bodies are the plan's durations ("plan") and the step results, each a dataclass of
execution/step_results.py staged with its to_json() and read back with its load().
MemoryStaging round-trips JSON bodies through json as DiskStaging does, so a value a step result
cannot stage fails the local runner as it would fail the Dagster ops.

Zombie safety: the run id is the owner of offsets[N] (rt.run_id, the Dagster run id), so a run
that lost the fence (a stale run, a zombie still writing after a takeover) can only write under
its own run id, which the winner never reads: nothing the winner reads can be overwritten by a
loser. A redo of batch N runs under a new run id and rewrites its staging from the read step on,
so stale files never leak into a batch. `clear(N)` removes every batch <= N (after commits[N]);
a zombie's late writes under an already cleared batch are removed by the next clear.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable

import pyarrow as pa
import pyarrow.ipc as ipc

from ..storage import Location


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
    """Staging under `root` (a Location: <checkpoint>/staging), keyed by batch and run id.

    `run_id` is a callable giving the current owner's run id (the runtime's run id may be set
    after the staging is made: the Dagster ops adopt the Dagster run id).
    """

    def __init__(self, root: Location, run_id: Callable[[], str]):
        self.root = root
        self._run_id = run_id

    def _name(self, batch_id: int, name: str) -> str:
        return f"{int(batch_id)}/{self._run_id()}/{name}"

    def put_table(self, batch_id: int, name: str, table: pa.Table) -> None:
        key = self._name(batch_id, name + ".arrow")
        path = self.root.local_path(key)
        if path is not None:     # local disk: stream to a temp file, publish by rename (no fsync: transient)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = os.path.join(os.path.dirname(path), f".tmp-{os.getpid()}-{os.path.basename(path)}")
            with pa.OSFile(tmp, "wb") as f, ipc.new_file(f, table.schema) as w:
                w.write_table(table)
            os.replace(tmp, path)
            return
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
        self.root.write_bytes(key, sink.getvalue().to_pybytes())

    def get_table(self, batch_id: int, name: str) -> pa.Table:
        key = self._name(batch_id, name + ".arrow")
        path = self.root.local_path(key)
        if path is not None:
            with pa.memory_map(path) as src:
                return ipc.open_file(src).read_all()
        return ipc.open_file(pa.BufferReader(self.root.read_bytes(key))).read_all()

    def put_json(self, batch_id: int, name: str, body: Any) -> None:
        self.root.write_json(self._name(batch_id, name + ".json"), body)

    def get_json(self, batch_id: int, name: str, default: Any = None) -> Any:
        try:
            return self.root.read_json(self._name(batch_id, name + ".json"))
        except FileNotFoundError:
            return default

    def clear(self, batch_id: int) -> None:
        _, dirs = self.root.list_dir("")
        for d in dirs:
            b = d.rsplit("/", 1)[-1]
            if b.isdigit() and int(b) <= batch_id:
                self.root.delete_prefix(b + "/")

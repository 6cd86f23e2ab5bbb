"""Opens, commits and aborts the state stores of a batch.

Contract: in batch N every stateful operator's every partition is loaded at version N-1 and, if
the whole process step succeeded, committed as version N; on any failure all are aborted and
version N-1 stays the latest loadable one. A redo of N therefore starts from N-1 again.
"""
from __future__ import annotations

from typing import Any


class StateManager:
    def __init__(self, checkpoint: str, provider_name: str, partitions: int, changelog: bool):
        self.checkpoint = checkpoint
        self.provider_name = provider_name
        self.partitions = partitions
        self.changelog = changelog
        self._provider = None
        self._open: dict[str, list[Any]] = {}

    @property
    def provider(self):
        if self._provider is None:
            from state import make_provider
            self._provider = make_provider(self.provider_name, self.checkpoint,
                                           changelog_checkpointing=self.changelog)
        return self._provider

    def stores_for(self, operator_id: str, batch_id: int) -> list[Any]:
        stores = self._open.get(operator_id)
        if stores is None:
            stores = [self.provider.open(operator_id, p, batch_id - 1) for p in range(self.partitions)]
            self._open[operator_id] = stores
        return stores

    def metrics(self, operator_id: str) -> dict[str, int]:
        total = {"num_rows_total": 0, "num_rows_updated": 0, "num_rows_removed": 0, "memory_used_bytes": 0}
        for s in self._open.get(operator_id, []):
            m = s.metrics()
            for k in total:
                total[k] += int(getattr(m, k))
        return total

    def commit_all(self, batch_id: int) -> dict[str, int]:
        versions = {}
        for op_id, stores in self._open.items():
            for s in stores:
                s.commit(batch_id)
            versions[op_id] = batch_id
        return versions

    def release(self) -> None:
        for stores in self._open.values():
            for s in stores:
                s.close()
        self._open.clear()

    def abort_all(self) -> None:
        for stores in self._open.values():
            for s in stores:
                try:
                    s.abort()
                finally:
                    s.close()
        self._open.clear()

    def close(self) -> None:
        self.abort_all()
        if self._provider is not None:
            self._provider.close()
            self._provider = None

"""Opens, commits and aborts the state stores of a batch.

Contract: in batch N every stateful operator's every partition is loaded at version N-1 and, if
the whole process step succeeded, committed as version N; on any failure all are aborted and
version N-1 stays the latest loadable one. A redo of N therefore starts from N-1 again.

The stores of a batch commit concurrently (each commit is mostly file writes and fsyncs, which
release the GIL). Each store's commit is atomic on its own; a crash part-way leaves some
partitions at N and others at N-1, which is harmless: commits[N] is not written, so the redo opens
every partition at N-1 and the provider discards the orphaned version N.

Tokens (zombie safety): a committed version is named by a token unique to the attempt that wrote
it (store.token after commit). Batch N opens each store at N-1 with the token recorded in
commits[N-1].extra["state_tokens"] ({operator id: [token of partition 0, 1, ...]}; `begin`), and
after the commit `tokens` gives this attempt's tokens, which commit_batch records in commits[N].
A runner that lost the fence may still commit a version N of its own, but under its own token,
which no commit row names: the winner and every later batch read only the winner's files.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from state.base import StateStoreProvider

from ..storage import Location


class StateManager:
    def __init__(self, checkpoint: Location, provider_name: str, partitions: int, changelog: bool,
                 local_dir: str | None = None):
        self.checkpoint = checkpoint
        self.provider_name = provider_name
        self.partitions = partitions
        self.changelog = changelog
        self.local_dir = local_dir
        self._provider = None
        self._open: dict[str, list[Any]] = {}
        self._warming: list = []                  # futures of warm()
        self._pool: ThreadPoolExecutor | None = None
        self._base: tuple[int, dict[str, list]] = (-1, {})       # (version, tokens) the stores open at
        self.committed: tuple[int, dict[str, list]] | None = None  # (batch, tokens) in this runner's commits[batch]

    @property
    def provider(self):
        if self._provider is None:
            from state import make_provider  # noqa: PLC0415 - one branch: the providers load rocksdict, only a stateful query opens state
            self._provider = make_provider(self.provider_name, self.checkpoint, local_dir=self.local_dir,
                                           changelog_checkpointing=self.changelog)
        return self._provider

    def begin(self, batch_id: int, tokens: dict[str, list]) -> None:
        """Batch `batch_id` opens its stores at batch_id - 1 with `tokens` (commits[batch_id-1]'s)."""
        self._base = (batch_id - 1, dict(tokens or {}))

    def _token(self, operator_id: str, partition: int, version: int) -> str | None:
        base_version, tokens = self._base
        if version < 0 or base_version != version:
            return None
        ts = tokens.get(operator_id) or []
        return ts[partition] if partition < len(ts) else None

    def warm(self, operator_ids: list[str]) -> None:
        """The local runner's start: let the provider prepare every partition of these operators
        (StateStoreProvider.warm: RocksDB opens its working copies) on the state pool, while the
        runner's start-up and first plan wait on the broker, the listing and their fsyncs. The first
        stores_for (and close) waits for it; a failure there is ignored (the open meets it again)."""
        if not operator_ids:
            return
        provider = self.provider
        if type(provider).warm is StateStoreProvider.warm:
            return
        pool = self._state_pool()
        self._warming = [pool.submit(provider.warm, op, p) for op in operator_ids for p in range(self.partitions)]

    def _await_warm(self) -> None:
        warming, self._warming = self._warming, []
        for f in warming:
            f.exception()

    def stores_for(self, operator_id: str, batch_id: int) -> list[Any]:
        stores = self._open.get(operator_id)
        if stores is None:
            self._await_warm()
            provider = self.provider
            v = batch_id - 1
            tokens = [self._token(operator_id, p, v) for p in range(self.partitions)]
            # opens served from the provider's memory or verified working copies take microseconds:
            # on this thread, no hand-off to the pool (on a busy machine a wake-up waits for a core)
            cached = all(provider.is_cached(operator_id, p, v, t) for p, t in enumerate(tokens))
            stores = self._each([lambda p=p: provider.open(operator_id, p, v, tokens[p])
                                 for p in range(self.partitions)], on_error=lambda s: s.close(),
                                parallel=not cached)
            self._open[operator_id] = stores
        return stores

    def _each(self, calls: list, on_error=None, parallel: bool = True) -> list:
        """Run the calls concurrently (state I/O: fsyncs, RocksDB opens, file reads release the GIL);
        their results in order, or the first failure once all have finished (`on_error` is applied to
        the results of the calls that succeeded). `parallel=False`: one after the other on this
        thread, stopping at the first failure."""
        if len(calls) <= 1 or not parallel:
            results: list = []
            try:
                for c in calls:
                    results.append(c())
            except BaseException:
                if on_error is not None:
                    for r in results:
                        on_error(r)
                raise
            return results
        pool = self._state_pool()
        # the first call runs on this thread, which would otherwise only wait (one thread hand-off
        # less per batch: on a busy machine each wake-up waits for a core)
        futures = [pool.submit(c) for c in calls[1:]]
        results: list = [None]
        errors: list = [None]
        try:
            results[0] = calls[0]()
        except BaseException as e:  # noqa: BLE001 - raised below, after the others finished
            errors[0] = e
        errors += [f.exception() for f in futures]
        results += [f.result() if e is None else None for f, e in zip(futures, errors[1:])]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            if on_error is not None:
                for r, e in zip(results, errors):
                    if e is None:
                        on_error(r)
            raise first
        return results

    def _state_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=min(8, max(2, self.partitions)),
                                            thread_name_prefix="increments-state")
        return self._pool

    def metrics(self, operator_id: str) -> dict[str, int]:
        total = {"num_rows_total": 0, "num_rows_updated": 0, "num_rows_removed": 0, "memory_used_bytes": 0}
        for s in self._open.get(operator_id, []):
            m = s.metrics()
            for k in total:
                total[k] += int(getattr(m, k))
        return total

    def commit_all(self, batch_id: int) -> dict[str, int]:
        """Commit every open store as version `batch_id`, concurrently; raise the first failure
        (after all commits have finished, so none is left running)."""
        self._each([lambda s=s: s.commit(batch_id) for ss in self._open.values() for s in ss])
        return {op_id: batch_id for op_id in self._open}

    def tokens(self) -> dict[str, list]:
        """The tokens of the versions just committed: {operator id: [partition 0's, 1's, ...]}."""
        return {op_id: [getattr(s, "token", None) for s in ss] for op_id, ss in self._open.items()}

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
        self._await_warm()
        self.abort_all()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._provider is not None:
            self._provider.close()
            self._provider = None

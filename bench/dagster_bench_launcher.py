"""The run launcher of `bench/dagster_overhead.py --celery`: one instance (one daemon, one run
queue, one PostgreSQL storage) on which a run tagged bench/launcher=default is launched by
Dagster's DefaultRunLauncher (a fresh process per run, through the code server) and every other
run by orchestration.celery.CeleryRunLauncher (a task on a warm Celery worker), so the bench can
alternate the two kinds of run in one measurement. Bench only: not a product launcher."""
from __future__ import annotations

from typing import Any

from dagster import DefaultRunLauncher

from orchestration.celery import CeleryRunLauncher
from orchestration.dagster_internals import CheckRunHealthResult, WorkerStatus

LAUNCHER_TAG = "bench/launcher"


class BenchDualRunLauncher(CeleryRunLauncher):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._default = DefaultRunLauncher()

    def register_instance(self, instance: Any) -> None:
        super().register_instance(instance)
        self._default.register_instance(instance)

    @staticmethod
    def _is_default(run: Any) -> bool:
        return run is not None and run.tags.get(LAUNCHER_TAG) == "default"

    def launch_run(self, context: Any) -> None:
        if self._is_default(context.dagster_run):
            return self._default.launch_run(context)
        return super().launch_run(context)

    def terminate(self, run_id: str) -> bool:
        if self._is_default(self._instance.get_run_by_id(run_id)):
            return self._default.terminate(run_id)
        return super().terminate(run_id)

    def check_run_worker_health(self, run: Any) -> CheckRunHealthResult:
        if self._is_default(run):           # the default launcher has no health check: never fail on it
            return CheckRunHealthResult(WorkerStatus.RUNNING, "default run launcher: not checked")
        return super().check_run_worker_health(run)

    def dispose(self) -> None:
        self._default.dispose()
        super().dispose()

    def join(self, timeout: int = 30) -> None:
        self._default.join(timeout)

"""Dagster job `<q>_migrate`: `increments migrate` as a run (increments/lifecycle/migrate.py).

Launch it with run config `{"ops": {"migrate": {"config": {"to": "<new checkpoint>"}}}}` after
stopping the query's trigger sensor (the run carries the query's tag, so no batch run of the query
runs beside it). Config `backfill`: `earliest` (default) or `from-sink` (the old query's Delta table
stands in for the source, then the source continues at the old query's offsets:
increments/lifecycle/from_sink.py; `sink_check: false` skips its rows check). Each AvailableNow
drain of the backfill is an observation on the sink asset (drain_id `migrate-<new query id>`,
drain_state `running`, drain_phase `sink` (the drain reading the old table) or `source`,
drain_batches so far, drain_round, input rows), the switch one more (drain_state `switched`, the
sink's new Delta version). A refused or failed migrate fails the run; nothing is switched. Then point the query's
checkpoint_location at the new checkpoint, redeploy and start the sensor again.
Build it with `make_migrate_job(spec)` (orchestration.factory.make_spec).
"""
from __future__ import annotations

from typing import Any

import dagster as dg

from .ops import redacted_errors


def make_migrate_job(spec: Any) -> dg.JobDefinition:
    @dg.op(name=f"{spec.key}__migrate", config_schema={
        "to": str, "max_rounds": dg.Field(int, default_value=50),
        "backfill": dg.Field(str, default_value="earliest", description="earliest | from-sink"),
        "sink_check": dg.Field(bool, default_value=True)},
        description="Backfill the changed query on a new checkpoint, then switch its Delta sink over.")
    @redacted_errors
    def migrate_op(context) -> dict:
        from increments.checkpoint.metadata import read_metadata  # noqa: PLC0415 - increments.checkpoint.metadata (sqlalchemy): kept off the code location's import path
        from increments.lifecycle.migrate import migrate  # noqa: PLC0415 - increments.lifecycle.migrate (deltalake, duckdb, numpy, pyarrow, sqlalchemy): kept off the code location's import path
        to = context.op_config["to"]
        seen = {"batches": 0}

        def on_round(r: dict) -> None:
            seen["batches"] += r["batches"]
            meta = read_metadata(to) or {}
            context.log_event(dg.AssetObservation(asset_key=spec.sink_key, metadata={
                "drain_id": f"migrate-{meta.get('id', '?')}", "drain_state": "running", "drain_phase": r["phase"],
                "drain_batches": seen["batches"], "drain_round": r["round"], "input_rows": r["input_rows"]}))
        res = migrate(spec.writer_factory(), to, spec.path, backfill=context.op_config["backfill"],
                      max_rounds=context.op_config["max_rounds"], report=context.log.info, on_round=on_round,
                      sink_check=context.op_config["sink_check"])
        context.log_event(dg.AssetObservation(asset_key=spec.sink_key, metadata={
            "drain_id": f"migrate-{res.query_id}", "drain_state": "switched", "drain_batches": seen["batches"],
            **({"sink_version": res.sink_version} if res.sink_version is not None else {}),
            **({"last_batch_id": res.last_batch_id} if res.last_batch_id is not None else {})}))
        return {"query_id": res.query_id, "sink_version": res.sink_version, "last_batch_id": res.last_batch_id}

    @dg.job(name=f"{spec.key}_migrate", tags=spec.job_tags, executor_def=dg.in_process_executor,
            description=f"Migrate query {spec.name} to a new checkpoint: AvailableNow backfill, then switch-over "
                        "of its Delta sink (config: to = the new checkpoint; backfill = earliest | from-sink).")
    def migrate_job():
        migrate_op.alias("migrate")()

    return migrate_job

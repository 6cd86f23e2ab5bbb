"""The code location the orchestration tests run on a real Dagster instance.

Everything lives under $INCREMENTS_TEST_DIR; the batch log is $INCREMENTS_LOG_URL (PostgreSQL).
- sensor_copy:  files -> Delta, processing_time 5 s, sensor running (drains by sensor)
- drain_copy:   files -> Delta, available_now, schedule every minute (drains by schedule tick)
- manual_copy:  files -> parquet, sensor stopped (launched by the tests)
- kill_copy:    files -> parquet through a sink that, once, sleeps after writing (to be SIGKILLed)
- bad_copy:     files -> parquet, sensor running, 2 retries 0.5 s apart, halt webhook
                $INCREMENTS_TEST_WEBHOOK (its landing gets a bad file: the query halts)
- cancel_copy:  files -> parquet, available_now, schedule stopped (drains launched by the tests), through
                a sink that holds a written batch while <root>/hold-cancel_copy exists
- silver_copy:  sensor_copy's Delta table -> parquet, sensor stopped (lineage across queries)
Asset keys are relative to $INCREMENTS_TEST_DIR: files/landing/<q>, delta/lake/<q>, files/lake/<q>.
"""
import os

import increments as inc
from increments.sinks.parquet import ParquetSink
from orchestration import build_definitions

ROOT = os.environ["INCREMENTS_TEST_DIR"]
SCHEMA = "id BIGINT, name STRING"


def landing(q: str) -> str:
    d = os.path.join(ROOT, "landing", q)
    os.makedirs(d, exist_ok=True)
    return d


class PausingParquetSink(ParquetSink):
    """Writes the batch, then, if <root>/pause-<query> exists, removes it, records its pid and sleeps."""

    def add_batch(self, batch_id, table):
        res = super().add_batch(batch_id, table)
        marker = os.path.join(ROOT, "pause-kill_copy")
        if os.path.exists(marker):
            os.remove(marker)
            with open(os.path.join(ROOT, "kill_copy.pid"), "w") as f:
                f.write(str(os.getpid()))
            import time
            time.sleep(300)
        return res


class HoldingParquetSink(ParquetSink):
    """Writes the batch; while <root>/hold-<query> exists, records <root>/held-<query>-<batch> and waits
    (so a test can act while a batch is in flight, then let it commit)."""

    def __init__(self, path, query):
        super().__init__(path)
        self.query = query

    def add_batch(self, batch_id, table):
        import time
        res = super().add_batch(batch_id, table)
        hold = os.path.join(ROOT, f"hold-{self.query}")
        if os.path.exists(hold):
            open(os.path.join(ROOT, f"held-{self.query}-{batch_id}"), "w").close()
            deadline = time.monotonic() + 300
            while os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.2)
        return res


def _writer(q: str, fmt: str, trigger: dict, max_files: int = 1, sink=None):
    frame = inc.read_stream.files(landing(q), format="json", schema=SCHEMA, max_files_per_trigger=max_files)
    w = frame.write_stream.format(fmt).output_mode("append")
    if sink is not None:
        w = w.sink(sink)
    return w.checkpoint_location(os.path.join(ROOT, "chk", q)).query_name(q).trigger(**trigger)


def sensor_copy():
    return _writer("sensor_copy", "delta", {"processing_time": "5 seconds"})


def drain_copy():
    return _writer("drain_copy", "delta", {"available_now": True})


def manual_copy():
    return _writer("manual_copy", "parquet", {"processing_time": "1 minute"})


def kill_copy():
    return _writer("kill_copy", "parquet", {"processing_time": "1 minute"},
                   sink=PausingParquetSink(os.path.join(ROOT, "lake", "kill_copy")))


def bad_copy():
    return _writer("bad_copy", "parquet", {"processing_time": "5 seconds"})


def cancel_copy():
    return _writer("cancel_copy", "parquet", {"available_now": True},
                   sink=HoldingParquetSink(os.path.join(ROOT, "lake", "cancel_copy"), "cancel_copy"))


def silver_copy():
    frame = inc.read_stream.delta(os.path.join(ROOT, "lake", "sensor_copy"))
    return (frame.write_stream.format("parquet").output_mode("append")
            .checkpoint_location(os.path.join(ROOT, "chk", "silver_copy")).query_name("silver_copy")
            .trigger(processing_time="1 minute"))


defs = build_definitions([
    (sensor_copy, {"path": os.path.join(ROOT, "lake", "sensor_copy")}),
    (drain_copy, {"path": os.path.join(ROOT, "lake", "drain_copy"), "cron_schedule": "* * * * *"}),
    (manual_copy, {"path": os.path.join(ROOT, "lake", "manual_copy"), "sensor_status": "stopped"}),
    (kill_copy, {"path": os.path.join(ROOT, "lake", "kill_copy"), "sensor_status": "stopped"}),
    (bad_copy, {"path": os.path.join(ROOT, "lake", "bad_copy"), "max_retries": 2, "retry_delay_s": 0.5,
                "halt_webhook": os.environ.get("INCREMENTS_TEST_WEBHOOK")}),
    (cancel_copy, {"path": os.path.join(ROOT, "lake", "cancel_copy"), "schedule_status": "stopped"}),
    (silver_copy, {"path": os.path.join(ROOT, "lake", "silver_copy"), "sensor_status": "stopped"}),
], asset_root=ROOT)

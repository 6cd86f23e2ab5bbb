"""The code location of the warm-worker tests (test_celery_runs.py): files on the moto S3 server
($INCREMENTS_TEST_BUCKET) -> parquet on S3, checkpoint on S3, batch log in PostgreSQL
($INCREMENTS_LOG_URL). Its sink, once, pauses after writing batch output when the marker
$INCREMENTS_TEST_DIR/pause exists (the test SIGKILLs or SIGSTOPs the worker then), recording the
pid; the pause ends when the test creates $INCREMENTS_TEST_DIR/release (or after 300 s)."""
import os

import increments as inc
from increments.sinks.parquet import ParquetSink
from orchestration import build_definitions

ROOT = os.environ.get("INCREMENTS_TEST_DIR", "/tmp")
BUCKET = os.environ.get("INCREMENTS_TEST_BUCKET", "s3://unset")
SCHEMA = "id BIGINT, name STRING"


class PausingSink(ParquetSink):
    def add_batch(self, batch_id, table):
        res = super().add_batch(batch_id, table)
        marker = os.path.join(ROOT, "pause")
        if os.path.exists(marker):
            os.remove(marker)
            with open(os.path.join(ROOT, "worker.pid"), "w") as f:
                f.write(str(os.getpid()))
            import time
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not os.path.exists(os.path.join(ROOT, "release")):
                time.sleep(0.2)
        return res


def warm_copy(bucket: str = BUCKET, out: str = "out", chk: str = "chk", trigger=None):
    frame = inc.read_stream.files(f"{bucket}/in", format="json", schema=SCHEMA, max_files_per_trigger=1)
    w = (frame.write_stream.format("parquet").output_mode("append").sink(PausingSink(f"{bucket}/{out}"))
         .option("log_url", os.environ.get("INCREMENTS_LOG_URL")).checkpoint_location(f"{bucket}/{chk}")
         .query_name("warm_copy"))
    return w.trigger(**(trigger or {"processing_time": "1 minute"}))


def other_copy(bucket: str = BUCKET):
    """Another query (its own tag increments/query=other_copy, an empty input: its runs are idle):
    the run queue starts its runs while a warm_copy run is in flight."""
    frame = inc.read_stream.files(f"{bucket}/in_other", format="json", schema=SCHEMA, wait_for_path=True)
    return (frame.write_stream.format("parquet").output_mode("append").option("path", f"{bucket}/out_other")
            .option("log_url", os.environ.get("INCREMENTS_LOG_URL")).checkpoint_location(f"{bucket}/chk_other")
            .query_name("other_copy").trigger(processing_time="1 minute"))


def warm_counts(bucket: str = BUCKET, out: str = "counts", chk: str = "counts_chk", trigger=None):
    """A windowed count per campaign over 2 state partitions (RocksDB), fanned out on the Celery executor."""
    from increments import functions as F
    frame = (inc.read_stream.files(f"{bucket}/cin", "json", "campaign_id STRING, event_time TIMESTAMP",
                                   max_files_per_trigger=1)
             .with_watermark("event_time", "5 minutes").group_by(F.window("event_time", "10 minutes"), "campaign_id")
             .count())
    w = (frame.write_stream.format("parquet").output_mode("append")
         .option("path", f"{bucket}/{out}").option("state_partitions", 2)
         .option("log_url", os.environ.get("INCREMENTS_LOG_URL")).checkpoint_location(f"{bucket}/{chk}")
         .query_name("warm_counts"))
    return w.trigger(**(trigger or {"processing_time": "1 minute"}))


def copy_job():
    return build_definitions([(warm_copy, {"path": f"{BUCKET}/out", "sensor_status": "stopped"})]).get_job_def(
        "warm_copy_batch")


def counts_job():
    return build_definitions([(warm_counts, {"executor": "celery", "sensor_status": "stopped", "max_retries": 1,
                                             "retry_delay_s": 0.5})]).get_job_def("warm_counts_batch")


defs = build_definitions([(warm_copy, {"path": f"{BUCKET}/out", "sensor_status": "stopped"}),
                          (other_copy, {"path": f"{BUCKET}/out_other", "sensor_status": "stopped"}),
                          (warm_counts, {"executor": "celery", "sensor_status": "stopped"})])

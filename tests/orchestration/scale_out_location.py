"""The code location of the no-shared-disk test (test_no_shared_disk.py), loaded by the run's
process and by every op process the multiprocess executor starts.

Each process that imports it gets a private working directory and TMPDIR of its own under
$INCREMENTS_TEST_PRIVATE (the "machine's" local disk): so the RocksDB working copies, read caches
and any relative path are private to the op's process, and the test wipes them between batches.
Everything shared lives on S3 ($INCREMENTS_TEST_BUCKET) and in PostgreSQL ($INCREMENTS_LOG_URL).
"""
import os
import tempfile

_private = os.environ.get("INCREMENTS_TEST_PRIVATE")
if _private:
    os.makedirs(_private, exist_ok=True)
    _own = tempfile.mkdtemp(prefix=f"proc-{os.getpid()}-", dir=_private)
    os.makedirs(os.path.join(_own, "tmp"))
    os.environ["TMPDIR"] = os.path.join(_own, "tmp")
    tempfile.tempdir = None
    os.chdir(_own)

import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402
from orchestration import build_definitions  # noqa: E402

BUCKET = os.environ.get("INCREMENTS_TEST_BUCKET", "s3://unset")
PARTITIONS = 2


def windowed_clicks(bucket: str = BUCKET, checkpoint: str | None = None, log_url: str | None = None):
    frame = (inc.read_stream.files(f"{bucket}/in", "json", "campaign_id STRING, event_time TIMESTAMP",
                                   max_files_per_trigger=1)
             .with_watermark("event_time", "5 minutes").group_by(F.window("event_time", "10 minutes"), "campaign_id")
             .count())
    return (frame.write_stream.format("parquet").option("path", f"{bucket}/out").output_mode("append")
            .option("state_partitions", PARTITIONS).option("log_url", log_url or os.environ.get("INCREMENTS_LOG_URL"))
            .checkpoint_location(checkpoint or f"{bucket}/chk").query_name("scale")
            .trigger(processing_time="1 minute"))


def batch_job():
    defs = build_definitions([(windowed_clicks, {"executor": "multiprocess", "sensor_status": "stopped",
                                                 "max_retries": 1, "retry_delay_s": 0.5})])
    return defs.get_job_def("scale_batch")

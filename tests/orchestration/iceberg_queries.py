"""A code location of Iceberg and Kafka queries for tests/orchestration/test_iceberg_kafka_assets.py.

Everything lives under $INCREMENTS_TEST_DIR (Iceberg: a pyiceberg SQL catalog on SQLite there,
its warehouse a directory there).
- ice_copy:   files -> expectations (warn, drop) -> Iceberg table lake.ice_copy, one file a batch
- ice_gold:   lake.ice_copy's appended snapshots (read_stream.iceberg) -> parquet (lineage)
- kafka_out:  files -> Kafka topic clicks_out on the transactional broker $INCREMENTS_TEST_KAFKA_TXN
- kafka_pg:   Kafka topic clicks_in ($INCREMENTS_TEST_KAFKA, two partitions) -> PostgreSQL table
              $INCREMENTS_TEST_PG_TABLE of $INCREMENTS_TEST_PG_URL
"""
import os

import increments as inc
from orchestration import build_definitions

ROOT = os.environ["INCREMENTS_TEST_DIR"]
SCHEMA = "id BIGINT, name STRING"
CATALOG = {"type": "sql", "uri": f"sqlite:///{os.path.join(ROOT, 'iceberg_catalog.db')}",
           "warehouse": f"file://{os.path.join(ROOT, 'warehouse')}"}


def landing(q: str) -> str:
    d = os.path.join(ROOT, "landing", q)
    os.makedirs(d, exist_ok=True)
    return d


def _files(q: str):
    return inc.read_stream.files(landing(q), format="json", schema=SCHEMA, max_files_per_trigger=1)


def ice_copy():
    frame = (_files("ice_copy").expect("id_small", "id < 1040", on_violation="warn")
             .expect("name_set", "name IS NOT NULL", on_violation="drop"))
    return (frame.write_stream.format("iceberg").option("catalog", CATALOG).option("table", "lake.ice_copy")
            .checkpoint_location(os.path.join(ROOT, "chk", "ice_copy")).query_name("ice_copy")
            .trigger(processing_time="1 minute"))


def ice_gold():
    frame = inc.read_stream.iceberg("lake.ice_copy", catalog=CATALOG)
    return (frame.write_stream.format("parquet").checkpoint_location(os.path.join(ROOT, "chk", "ice_gold"))
            .query_name("ice_gold").trigger(processing_time="1 minute"))


def kafka_out():
    return (_files("kafka_out").select("name AS value").write_stream.format("kafka")
            .option("kafka.bootstrap.servers", os.environ.get("INCREMENTS_TEST_KAFKA_TXN", "127.0.0.1:1"))
            .option("topic", "clicks_out")
            .checkpoint_location(os.path.join(ROOT, "chk", "kafka_out")).query_name("kafka_out")
            .trigger(processing_time="1 minute"))


def kafka_pg():
    frame = (inc.read_stream.kafka(os.environ.get("INCREMENTS_TEST_KAFKA", "127.0.0.1:1"), topic="clicks_in",
                                   starting_offsets="earliest")
             .parse_json("id BIGINT, name STRING").select("id", "name"))
    return (frame.write_stream.format("postgres").option("url", os.environ.get("INCREMENTS_TEST_PG_URL", ""))
            .option("table", os.environ.get("INCREMENTS_TEST_PG_TABLE", "kafka_pg"))
            .checkpoint_location(os.path.join(ROOT, "chk", "kafka_pg")).query_name("kafka_pg")
            .trigger(processing_time="1 minute"))


defs = build_definitions([
    (ice_copy, {"sensor_status": "stopped"}),
    (ice_gold, {"path": os.path.join(ROOT, "lake", "ice_gold"), "sensor_status": "stopped"}),
    (kafka_out, {"sensor_status": "stopped"}),
    (kafka_pg, {"sensor_status": "stopped"}),
], asset_root=ROOT)

"""Issue 31.4 on a real Dagster instance (PostgreSQL storage, `dagster-daemon` and
`dagster-webserver` subprocesses, read through GraphQL): Kafka and Iceberg sinks and the Iceberg
source are assets named kafka/<topic> and iceberg/<namespace>/<table> with their kinds and lineage,
and a query writing Iceberg (pyiceberg SQL catalog on SQLite, warehouse a local directory) has one
materialization per batch carrying the same metadata as the other sinks; its expectations are one
asset check each on the sink, evaluated per batch (issue 30.3)."""
from __future__ import annotations

import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ICE = ["iceberg", "lake", "ice_copy"]


def _write(root: str, f: int, null_names: int = 0) -> None:
    d = os.path.join(root, "landing", "ice_copy")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"part-{f:04d}.json"), "w") as out:
        for r in range(50):
            out.write(json.dumps({"id": f * 1000 + r, "name": None if r < null_names else f"n{r}"}) + "\n")


@pytest.fixture(scope="module")
def ice_env(tmp_path_factory, kafka_broker, kafka_txn_broker, pg_url):
    from broker import create_topic, produce
    from orch_testutil import create_db, drop_db
    from orchestration.home import prepare_home
    from orchestration.local_instance import LocalDagster
    root = str(tmp_path_factory.mktemp("ice"))
    db, url = create_db("inc_dagster_ice")
    home = os.path.join(root, "dagster_home")
    env = prepare_home(home, pg_url=url.replace("postgresql+psycopg://", "postgresql+psycopg2://"))
    create_topic(kafka_broker, "clicks_in", partitions=2)
    for part in (0, 1):                      # five records in each partition
        produce(kafka_broker, "clicks_in", [json.dumps({"id": i, "name": f"k{i}"}) for i in range(5 * part, 5 * part + 5)],
                partition=part)
    create_topic(kafka_txn_broker, "clicks_out")
    env.update(INCREMENTS_TEST_DIR=root, PYTHONPATH=REPO, INCREMENTS_TEST_KAFKA=kafka_broker,
               INCREMENTS_TEST_KAFKA_TXN=kafka_txn_broker, INCREMENTS_TEST_PG_URL=pg_url,
               INCREMENTS_TEST_PG_TABLE="kafka_pg")
    ws = os.path.join(root, "workspace.yaml")
    with open(ws, "w") as f:
        f.write(f"load_from:\n  - python_file:\n      relative_path: {os.path.join(HERE, 'iceberg_queries.py')}\n"
                f"      attribute: defs\n      working_directory: {REPO}\n      location_name: ice_test\n")
    _write(root, 0)
    _write(root, 1, null_names=5)            # batch 1: 5 rows dropped by name_set, 10 ids >= 1040 warned
    inst = LocalDagster(home, ws, env=env, cwd=REPO, location="ice_test")
    inst.start(timeout=240)
    try:
        yield {"dagster": inst, "root": root, "kafka": kafka_broker, "kafka_txn": kafka_txn_broker}
    finally:
        inst.stop()
        drop_db(db)


def _asset_nodes(d) -> dict[str, dict]:
    q = """{ assetNodes { assetKey { path } kinds dependencyKeys { path } } }"""
    return {"/".join(n["assetKey"]["path"]): n for n in d.gql(q)["assetNodes"]}


def test_kafka_and_iceberg_assets_are_named_by_what_they_are(ice_env):
    nodes = _asset_nodes(ice_env["dagster"])
    assert "iceberg" in nodes["iceberg/lake/ice_copy"]["kinds"]
    assert [k["path"] for k in nodes["iceberg/lake/ice_copy"]["dependencyKeys"]] == [["files", "landing", "ice_copy"]]
    # the Iceberg source is the table's asset: the reader is downstream of the writer
    assert [k["path"] for k in nodes["files/lake/ice_gold"]["dependencyKeys"]] == [ICE]
    assert "kafka" in nodes["kafka/clicks_out"]["kinds"]
    assert [k["path"] for k in nodes["kafka/clicks_out"]["dependencyKeys"]] == [["files", "landing", "kafka_out"]]


def test_iceberg_sink_one_materialization_per_batch(ice_env):
    d, root = ice_env["dagster"], ice_env["root"]
    for _ in range(2):
        run = d.wait_run(d.launch("ice_copy_batch"), timeout=300)
        assert run["status"] == "SUCCESS", run
    mats = d.materializations(ICE)
    assert [m["metadata"]["batch_id"] for m in mats] == ["1", "0"]
    newest = mats[0]["metadata"]
    assert newest["dagster/table_name"] == "lake.ice_copy"
    assert newest["dagster/row_count"] == 95 and newest["row_count_of"] == "table"   # 5 rows dropped
    assert mats[1]["metadata"]["dagster/row_count"] == 50
    assert [c["name"] for c in newest["dagster/column_schema"]["columns"]] == ["id", "name"]
    assert newest["num_output_rows"] == 45 and "read" in newest and "dagster_run" in newest
    # the table: one snapshot per batch, carrying the batch id the materialization names
    from pyiceberg.catalog import load_catalog
    cat = load_catalog("increments", type="sql", uri=f"sqlite:///{os.path.join(root, 'iceberg_catalog.db')}",
                       warehouse=f"file://{os.path.join(root, 'warehouse')}")
    t = cat.load_table("lake.ice_copy")
    assert [s.summary.additional_properties.get("increments.batch-id") for s in t.snapshots()] == ["0", "1"]
    assert t.scan().to_arrow().num_rows == 95
    # issue 30.3: one check per expectation on the sink, per batch, counts in its metadata
    small = d.check_executions(ICE, "id_small")
    assert [(c["success"], c["metadata"]["batch_id"], c["metadata"]["failed_rows"]) for c in small] == \
        [(False, "1", 10), (True, "0", 0)]                  # warn: a warning on batch 1, the rows kept
    named = d.check_executions(ICE, "name_set")[0]
    assert (named["success"], named["metadata"]["passed_rows"], named["metadata"]["failed_rows"]) == (False, 45, 5)
    assert "dropped" in named["description"]


def test_iceberg_compact_job_in_process(tmp_path, monkeypatch):
    """Issue 31.2's maintenance in Dagster: <q>_compact of an Iceberg sink compacts the batches'
    files into one REPLACE snapshot and expires the older ones (vacuum_retention), recorded as an
    observation on iceberg/<namespace>/<table>; the query goes on exactly once after it."""
    import dagster as dg

    import increments as inc
    from orchestration import build_definitions
    root = str(tmp_path)
    catalog = {"type": "sql", "uri": f"sqlite:///{root}/cat.db", "warehouse": f"file://{root}/wh"}

    def compacted():
        return (inc.read_stream.files(os.path.join(root, "landing", "ice_copy"), format="json",
                                      schema="id BIGINT, name STRING", max_files_per_trigger=1)
                .write_stream.format("iceberg").option("catalog", catalog).option("table", "lake.small")
                .checkpoint_location(os.path.join(root, "chk")).query_name("compacted")
                .trigger(processing_time="1 minute"))
    defs = build_definitions([(compacted, {"sensor_status": "stopped", "vacuum_retention": "0 hours"})],
                             asset_root=root)
    assert defs.get_schedule_def("compacted_compact_schedule").default_status == dg.DefaultScheduleStatus.STOPPED
    inst = dg.DagsterInstance.ephemeral()
    for f in range(3):
        _write(root, f)
        assert defs.resolve_job_def("compacted_batch").execute_in_process(instance=inst).success
    res = defs.get_job_def("compacted_compact").execute_in_process(instance=inst)
    assert res.success
    obs = inst.fetch_observations(dg.AssetKey(["iceberg", "lake", "small"]), limit=1).records[0]
    md = obs.asset_observation.metadata
    assert (md["files_before"].value, md["files_removed"].value, md["files_added"].value,
            md["files_after"].value) == (3, 3, 1, 1)
    assert md["snapshots_expired"].value == 3
    from pyiceberg.catalog import load_catalog
    t = load_catalog("increments", **catalog).load_table("lake.small")
    assert [s.summary.operation.value for s in t.snapshots()] == ["replace"]
    assert t.scan().to_arrow().num_rows == 150
    _write(root, 3)
    assert defs.resolve_job_def("compacted_batch").execute_in_process(instance=inst).success
    assert load_catalog("increments", **catalog).load_table("lake.small").scan().to_arrow().num_rows == 200


def test_a_batch_reading_an_iceberg_sink_names_its_snapshots_and_batches(ice_env):
    """ice_gold reads ice_copy's Iceberg table: its batch names the snapshots it read and the
    ice_copy batches that committed them, with links to their runs."""
    d = ice_env["dagster"]
    if len([m for m in d.materializations(ICE)]) < 2:
        for _ in range(2):
            d.wait_run(d.launch("ice_copy_batch"), timeout=300)
    run = d.wait_run(d.launch("ice_gold_batch"), timeout=300)
    assert run["tags"]["increments/outcome"] == "committed", run
    md = d.materializations(["files", "lake", "ice_gold"])[0]["metadata"]
    assert md["upstream"] == "ice_copy 0-1"
    lineage = json.loads(md["lineage"])[0]
    assert lineage["kind"] == "iceberg" and len(lineage["snapshots"]) == 2
    assert md["read"].startswith("0: iceberg snapshots ")
    copy_runs = {m["metadata"]["batch_id"]: m["runId"] for m in d.materializations(ICE)}
    assert md["upstream_run[ice_copy 0]"] == copy_runs["0"] and md["upstream_run[ice_copy 1]"] == copy_runs["1"]
    assert md["dagster/row_count"] == 95 and md["dagster/uri"].startswith("file://")


def observe(d, key: list[str]) -> dict:
    """Observe a source asset as the UI's "Observe sources" does; its newest observation."""
    q = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
             ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
    p = {"selector": {"repositoryLocationName": d.location, "repositoryName": "__repository__", "jobName": "__ASSET_JOB",
                      "assetSelection": [{"path": key}], "assetCheckSelection": []}, "runConfigData": {}}
    res = d.gql(q, {"p": p})["launchRun"]
    assert res["__typename"] == "LaunchRunSuccess", res
    assert d.wait_run(res["run"]["runId"], 300)["status"] == "SUCCESS"
    return d.materializations(key, kind="assetObservations")[0]


def _stale(d, key: list[str]) -> str:
    return d.gql("""query($k: [AssetKeyInput!]) { assetNodes(assetKeys: $k) { staleStatus } }""",
                 {"k": [{"path": key}]})["assetNodes"][0]["staleStatus"]


def test_kafka_and_postgres_sinks_carry_dagster_standard_metadata(ice_env):
    """Item 5 on the sinks without a Delta/parquet table: a Kafka sink (transactional broker) and a
    PostgreSQL sink reading a Kafka topic: row count, column schema, URI or table name, kinds; the
    Kafka batch names its topic/partition/offset ranges; the topic's observation carries the lag and
    a data version, and the PostgreSQL sink is Unsynced exactly while the topic holds unread records."""
    from broker import produce
    d, root = ice_env["dagster"], ice_env["root"]
    os.makedirs(os.path.join(root, "landing", "kafka_out"), exist_ok=True)
    with open(os.path.join(root, "landing", "kafka_out", "part-0000.json"), "w") as f:
        f.write("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in range(50)))
    run = d.wait_run(d.launch("kafka_out_batch"), timeout=300)
    assert run["tags"]["increments/outcome"] == "committed", run
    out = d.materializations(["kafka", "clicks_out"])[0]["metadata"]
    assert (out["dagster/row_count"], out["row_count_of"]) == (50, "batch")
    assert [c["name"] for c in out["dagster/column_schema"]["columns"]] == ["value"]
    assert out["dagster/uri"] == f"kafka://{ice_env['kafka_txn']}/clicks_out"
    nodes = _asset_nodes(d)
    assert set(nodes["kafka/clicks_out"]["kinds"]) == {"kafka", "duckdb"}
    assert set(nodes["postgres/kafka_pg"]["kinds"]) == {"postgres", "duckdb"}

    obs = observe(d, ["kafka", "clicks_in"])
    assert obs["metadata"]["offsets_pending"] == 10 and obs["metadata"]["reader"] == "kafka_pg"
    run = d.wait_run(d.launch("kafka_pg_batch"), timeout=300)
    assert run["tags"]["increments/outcome"] == "committed", run
    pg = d.materializations(["postgres", "kafka_pg"])[0]["metadata"]
    assert (pg["dagster/row_count"], pg["row_count_of"], pg["dagster/table_name"]) == (10, "table", "kafka_pg")
    assert [c["name"] for c in pg["dagster/column_schema"]["columns"]] == ["id", "name"]
    ranges = json.loads(pg["lineage"])[0]["ranges"]
    assert sorted((r["topic"], r["partition"], r["start"], r["end"]) for r in ranges) == \
        [("clicks_in", 0, 0, 5), ("clicks_in", 1, 0, 5)]
    assert pg["read"] == "0: kafka clicks_in/0 [0, 5), clicks_in/1 [0, 5)"
    assert observe(d, ["kafka", "clicks_in"])["metadata"]["offsets_pending"] == 0
    assert _stale(d, ["postgres", "kafka_pg"]) == "FRESH"
    produce(ice_env["kafka"], "clicks_in", [json.dumps({"id": 10 + i, "name": "late"}) for i in range(3)], partition=0)
    assert observe(d, ["kafka", "clicks_in"])["metadata"]["offsets_pending"] == 3
    assert _stale(d, ["postgres", "kafka_pg"]) == "STALE"
    d.wait_run(d.launch("kafka_pg_batch"), timeout=300)
    assert d.materializations(["postgres", "kafka_pg"])[0]["metadata"]["dagster/row_count"] == 13
    observe(d, ["kafka", "clicks_in"])
    assert _stale(d, ["postgres", "kafka_pg"]) == "FRESH"

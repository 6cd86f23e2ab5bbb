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
def ice_env(tmp_path_factory):
    from orch_testutil import create_db, drop_db
    from orchestration.home import prepare_home
    from orchestration.local_instance import LocalDagster
    root = str(tmp_path_factory.mktemp("ice"))
    db, url = create_db("inc_dagster_ice")
    home = os.path.join(root, "dagster_home")
    env = prepare_home(home, pg_url=url.replace("postgresql+psycopg://", "postgresql+psycopg2://"))
    env.update(INCREMENTS_TEST_DIR=root, PYTHONPATH=REPO)
    ws = os.path.join(root, "workspace.yaml")
    with open(ws, "w") as f:
        f.write(f"load_from:\n  - python_file:\n      relative_path: {os.path.join(HERE, 'iceberg_queries.py')}\n"
                f"      attribute: defs\n      working_directory: {REPO}\n      location_name: ice_test\n")
    _write(root, 0)
    _write(root, 1, null_names=5)            # batch 1: 5 rows dropped by name_set, 10 ids >= 1040 warned
    inst = LocalDagster(home, ws, env=env, cwd=REPO, location="ice_test")
    inst.start(timeout=240)
    try:
        yield {"dagster": inst, "root": root}
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
    assert newest["dagster/row_count"] == 45 and newest["row_count_of"] == "batch"   # 5 rows dropped
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

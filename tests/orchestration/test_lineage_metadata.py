"""Issue 26 items 4-6 on the example queries, runs executed in process on one instance: a silver
batch names the bronze batches it read (and links their runs), a file batch names its files;
every sink materialization carries Dagster's standard metadata (row count, column schema, URI);
kinds name the storage; checks exist only where they apply; `increments history` shows lineage."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import dagster as dg

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROWS = 10


def _load(tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTS_EXAMPLES_DIR", str(tmp_path))
    import importlib
    import examples.queries as q
    importlib.reload(q)
    from orchestration.factory import definitions_from_module
    return definitions_from_module("examples.queries")


def _write(tmp_path, n: int) -> list[str]:
    d = os.path.join(str(tmp_path), "landing", "clicks")
    os.makedirs(d, exist_ok=True)
    names = []
    for f in range(n):
        names.append(f"c-{f}.json")
        with open(os.path.join(d, names[-1]), "w") as out:
            for r in range(ROWS):
                out.write(json.dumps({"campaign_id": "c1", "user_id": f"u{r}",
                                      "event_time": f"2026-01-01T0{f}:00:{r:02d}Z"}) + "\n")
    return names


def _write_one(tmp_path, name: str) -> None:
    with open(os.path.join(str(tmp_path), "landing", "clicks", name), "w") as out:
        out.write(json.dumps({"campaign_id": "c2", "user_id": "u", "event_time": "2026-01-01T09:00:00Z"}) + "\n")


def _mat(inst, key):
    return inst.get_latest_materialization_event(dg.AssetKey(key)).asset_materialization


def test_silver_batch_names_its_bronze_batches_and_standard_metadata(tmp_path, monkeypatch):
    defs = _load(tmp_path, monkeypatch)
    names = _write(tmp_path, 3)
    inst = dg.DagsterInstance.ephemeral()
    bronze = defs.get_job_def("clicks_bronze_batch")
    bronze_runs = [bronze.execute_in_process(instance=inst, raise_on_error=False).run_id for _ in range(2)]
    # a file batch names the files it read (max_files_per_trigger=2: batch 0 = two files)
    b1 = _mat(inst, ["delta", "lake", "clicks_bronze"])
    lin = b1.metadata["lineage"].value
    assert lin[0]["kind"] == "files" and lin[0]["files"] == names[2:]
    assert names[2] in b1.metadata["read"].value
    # Dagster's standard metadata on every sink materialization
    assert b1.metadata["dagster/row_count"].value == 3 * ROWS            # the table's rows after batch 1
    cols = {c.name: c.type for c in b1.metadata["dagster/column_schema"].schema.columns}
    assert set(cols) == {"campaign_id", "user_id", "event_time"} and cols["campaign_id"] == "string"
    assert b1.metadata["dagster/uri"].value.endswith(os.path.join("lake", "clicks_bronze"))
    # identifiers are text (not plotted); a query without a watermark shows none (no 1970 epoch)
    assert isinstance(b1.metadata["batch_id"], dg.TextMetadataValue)
    assert isinstance(b1.metadata["attempt"], dg.TextMetadataValue)
    assert "watermark" not in b1.metadata and "next_watermark" not in b1.metadata

    # source observations (the freshness sensors): the backlog and a data version per source asset
    res = defs.get_sensor_def("clicks_silver_freshness")(dg.build_sensor_context(instance=inst, definitions=defs))
    obs = [e for e in res.asset_events if isinstance(e, dg.AssetObservation)]
    assert [(o.asset_key.path, o.metadata["reader"].value, o.metadata["versions_behind"].value) for o in obs] == \
        [(["delta", "lake", "clicks_bronze"], "clicks_silver", 2)]       # two bronze versions not read yet
    assert "dagster/data_version" not in (obs[0].tags or {})           # bronze's versions are its materializations
    res = defs.get_sensor_def("clicks_bronze_freshness")(dg.build_sensor_context(instance=inst, definitions=defs))
    (o,) = [e for e in res.asset_events if isinstance(e, dg.AssetObservation)]
    assert o.asset_key.path == ["files", "landing", "clicks"] and o.metadata["files_pending"].value == 0
    assert o.tags["dagster/data_version"] == names[-1]                 # the newest file available
    _write_one(tmp_path, "c-9.json")
    res = defs.get_sensor_def("clicks_bronze_freshness")(dg.build_sensor_context(instance=inst, definitions=defs,
                                                                                 cursor=res.cursor))
    (o,) = [e for e in res.asset_events if isinstance(e, dg.AssetObservation)]
    assert o.metadata["files_pending"].value == 1 and o.tags["dagster/data_version"] == "c-9.json"

    silver = defs.get_job_def("clicks_silver_batch").execute_in_process(instance=inst, raise_on_error=False)
    assert silver.success
    s0 = _mat(inst, ["delta", "lake", "clicks_silver"])
    assert s0.metadata["upstream"].value == "clicks_bronze 0-1"
    up = s0.metadata["upstream_batches"].value
    assert [(u["query"], u["batch_ids"]) for u in up] == [("clicks_bronze", [0, 1])]
    links = {k: v.run_id for k, v in s0.metadata.items() if k.startswith("upstream_run[")}
    assert links == {"upstream_run[clicks_bronze 0]": bronze_runs[0], "upstream_run[clicks_bronze 1]": bronze_runs[1]}
    assert s0.metadata["lineage"].value[0]["versions"] == [0, 1]          # the bronze table's Delta versions
    assert s0.metadata["dagster/row_count"].value == 3 * ROWS

    # kinds name the storage and the engine that computes the sink, not `increments`
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey(["delta", "lake", "clicks_silver"])).kinds == {"delta", "duckdb"}
    assert graph.get(dg.AssetKey(["files", "landing", "clicks"])).kinds == {"files"}
    # checks only where they apply: no Kafka source anywhere; a watermark only in hourly_clicks
    checks = {(tuple(k.asset_key.path), k.name) for c in defs.asset_checks for k in c.check_keys}
    assert not [c for c in checks if c[1] == "kafka_lag"]
    assert (("delta", "lake", "hourly_clicks"), "watermark_lag") in checks
    assert (("delta", "lake", "clicks_bronze"), "watermark_lag") not in checks
    # the halt check blocks downstream assets; the health checks only warn
    silver_checks = {k.name: graph.get_check_spec(k) for c in defs.asset_checks for k in c.check_keys
                     if tuple(k.asset_key.path) == ("delta", "lake", "clicks_silver")}
    (errors,) = [c for n, c in silver_checks.items() if n.endswith("batch_errors")]
    assert errors.blocking
    health = [c for n, c in silver_checks.items() if not n.endswith("batch_errors")]
    assert health and not [c for c in health if c.blocking]

    # the same lineage in `increments history`
    out = subprocess.run([sys.executable, "-m", "increments.cli", "history", "clicks_silver"], cwd=REPO,
                         env={**os.environ, "INCREMENTS_EXAMPLES_DIR": str(tmp_path)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "upstream" in out.stdout and "clicks_bronze 0-1" in out.stdout and "delta v0-1" in out.stdout
    out = subprocess.run([sys.executable, "-m", "increments.cli", "history", "clicks_bronze"], cwd=REPO,
                         env={**os.environ, "INCREMENTS_EXAMPLES_DIR": str(tmp_path)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "files c-0.json, c-1.json" in out.stdout and "files c-2.json" in out.stdout

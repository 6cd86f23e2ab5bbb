"""deploy/ checked without a cluster: the k8s_job_executor settings and the Helm values' run
launcher against dagster-k8s's own config schemas (as the chart renders them into the instance's
run_launcher config), the docker-compose instance file against Dagster's instance schema, and a
query built with the configured k8s executor; a wrong key is refused (the check has teeth)."""
from __future__ import annotations

import os

import dagster as dg
import pytest
import yaml
from dagster._config import process_config, resolve_to_config_type

dagster_k8s = pytest.importorskip("dagster_k8s")

DEPLOY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "deploy")


def _yaml(name: str):
    with open(os.path.join(DEPLOY, name)) as f:
        return yaml.safe_load(f)


def _launcher_config(values: dict) -> dict:
    """The instance's run_launcher config the chart renders (configmap-instance.yaml) from
    runLauncher.config.k8sRunLauncher: camelCase keys to dagster-k8s's, secrets and config maps
    by name, plus what the chart itself adds."""
    k = values["runLauncher"]["config"]["k8sRunLauncher"]
    out = {"instance_config_map": "dagster-instance", "dagster_home": "/opt/dagster/dagster_home",
           "postgres_password_secret": values["global"]["postgresqlSecretName"],
           "service_account_name": "dagster", "image_pull_policy": k["imagePullPolicy"],
           "load_incluster_config": k["loadInclusterConfig"],
           "env_config_maps": [c["name"] for c in k.get("envConfigMaps", [])],
           "env_secrets": [s["name"] for s in k.get("envSecrets", [])], "env_vars": k.get("envVars", []),
           "volume_mounts": k.get("volumeMounts", []), "volumes": k.get("volumes", []),
           "labels": k.get("labels", {}), "fail_pod_on_run_failure": k["failPodOnRunFailure"]}
    if k.get("jobNamespace"):
        out["job_namespace"] = k["jobNamespace"]
    return out


def test_helm_values_run_launcher_is_valid_k8s_run_launcher_config():
    values = _yaml("helm-values.yaml")
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    schema = resolve_to_config_type(dagster_k8s.K8sRunLauncher.config_type())
    conf = _launcher_config(values)
    res = process_config(schema, conf)
    assert res.success, res.errors
    assert {"increments-object-store", "increments-log"} <= set(conf["env_secrets"])
    bad = process_config(schema, {**conf, "env_secret": ["typo"]})
    assert not bad.success
    deployment = values["dagster-user-deployments"]["deployments"][0]
    assert {s["name"] for s in deployment["envSecrets"]} == {"increments-object-store", "increments-log"}
    limits = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]
    assert limits == [{"key": "increments/query", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}]


def test_k8s_job_executor_config_is_valid_and_a_query_can_use_it():
    conf = _yaml("k8s_job_executor.yaml")
    res = process_config(dagster_k8s.k8s_job_executor.config_schema.config_type, conf)
    assert res.success, res.errors
    assert not process_config(dagster_k8s.k8s_job_executor.config_schema.config_type,
                              {**conf, "max_concurent": 2}).success
    import increments as inc
    from orchestration import build_definitions

    def q():
        frame = inc.read_stream.files("/nonexistent/in", "json", "k STRING").group_by("k").count()
        return (frame.write_stream.format("memory").output_mode("complete").query_name("k8s_q")
                .checkpoint_location("s3://bucket/chk/k8s_q").option("log_url", "postgresql+psycopg://h/db"))
    executor = dagster_k8s.k8s_job_executor.configured(conf)
    job = build_definitions([(q, {"executor": executor})]).resolve_job_def("k8s_q_batch")
    assert job.executor_def is executor
    batch = job.graph.node_dict["k8s_q"].definition                   # the sink asset's batch graph
    assert {"partition", "join"} <= set(batch.node_dict)              # fans out per state partition


def test_compose_instance_file_is_a_valid_dagster_instance_config(tmp_path, monkeypatch):
    from dagster._core.instance.config import dagster_instance_config
    with open(os.path.join(DEPLOY, "compose", "dagster.yaml")) as f:
        (tmp_path / "dagster.yaml").write_text(f.read())
    monkeypatch.setenv("DAGSTER_PG_URL", "postgresql+psycopg2://u@h/db")
    conf, _ = dagster_instance_config(str(tmp_path))
    assert conf["run_launcher"]["class"] == "DefaultRunLauncher"
    compose = _yaml("docker-compose.yaml")
    assert {"postgres", "minio", "code", "webserver", "daemon"} <= set(compose["services"])
    assert not any("volumes" in s and any(":/data" in v or "checkpoint" in v for v in s["volumes"])
                   for n, s in compose["services"].items() if n in ("code", "webserver", "daemon"))

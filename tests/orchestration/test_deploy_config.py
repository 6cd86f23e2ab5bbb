"""deploy/ checked without a cluster: the k8s_job_executor settings against dagster-k8s's own config
schema, what our Helm values set for the run launcher against dagster-k8s's K8sRunLauncher fields,
the docker-compose instance file against Dagster's instance schema, and a query built with the
configured k8s executor; a wrong key is refused (the check has teeth).

The Helm chart is not rendered here (it is not vendored, and rendering it needs helm): the test
validates only what is ours, the keys and values deploy/helm-values.yaml sets under
runLauncher.config.k8sRunLauncher, each against the dagster-k8s field the chart maps it to (the
chart's camelCase key in snake_case); what the chart adds itself (instance_config_map,
dagster_home, ...) is the chart's. dagster-k8s is a dev dependency (pyproject's test extra): a
missing one fails these tests, it does not skip them."""
from __future__ import annotations

import os
import re

import dagster_k8s
import yaml
from dagster._config import process_config, resolve_to_config_type

DEPLOY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "deploy")
#: keys whose chart form is a list of {name: ...} objects, dagster-k8s's a list of names
NAMED_LISTS = {"envConfigMaps", "envSecrets"}


def _yaml(name: str):
    with open(os.path.join(DEPLOY, name)) as f:
        return yaml.safe_load(f)


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _launcher_errors(ours: dict) -> list[str]:
    """Each key we set under k8sRunLauncher, checked against the K8sRunLauncher field it maps to."""
    fields = resolve_to_config_type(dagster_k8s.K8sRunLauncher.config_type()).fields
    errors = []
    for key, value in ours.items():
        field = fields.get(_snake(key))
        if field is None:
            errors.append(f"{key}: no K8sRunLauncher field {_snake(key)!r}")
            continue
        if key in NAMED_LISTS:
            if not all(isinstance(v, dict) and set(v) == {"name"} for v in value):
                errors.append(f"{key}: the chart takes a list of {{name: ...}}, got {value!r}")
                continue
            value = [v["name"] for v in value]
        res = process_config(field.config_type, value)
        if not res.success:
            errors.append(f"{key}: {[e.message for e in res.errors]}")
    return errors


def test_helm_values_run_launcher_sets_only_valid_k8s_run_launcher_fields():
    values = _yaml("helm-values.yaml")
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    ours = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert _launcher_errors(ours) == []
    assert {s["name"] for s in ours["envSecrets"]} == {"increments-object-store", "increments-log"}
    # the check has teeth: a misspelt key, a wrong type, a chart list in dagster-k8s's form
    assert _launcher_errors({**ours, "envSecret": [{"name": "x"}]}) == ["envSecret: no K8sRunLauncher field 'env_secret'"]
    assert _launcher_errors({"failPodOnRunFailure": "yes"})[0].startswith("failPodOnRunFailure: ")
    assert _launcher_errors({"envSecrets": ["increments-log"]})[0].startswith("envSecrets: the chart takes")
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


def test_every_deployed_instance_holds_one_run_per_query_also_for_materializations():
    """A Materialize from the asset graph has no job tags: the one-run-per-query limit then comes
    from the run-granularity pool increments/<q> with one slot (orchestration/dagster.yaml). The
    compose instances and the Helm values deploy it too (the chart's concurrency.pools renders
    pools: {granularity, default_limit})."""
    for name in ("compose/dagster.yaml", "compose/dagster-celery.yaml"):
        conc = _yaml(name)["concurrency"]
        assert conc["pools"] == {"granularity": "run", "default_limit": 1}, name
        assert conc["runs"]["tag_concurrency_limits"][0]["key"] == "increments/query", name
    assert _yaml("helm-values.yaml")["concurrency"]["pools"] == {"granularity": "run", "defaultLimit": 1}

"""deploy/ for warm Celery workers (issue 32), checked without a cluster or helm:

- deploy/helm-values-celery.yaml sets only keys the Dagster chart has (its pydantic schema
  helm/dagster/schema/.../values.py, daemon.py, webserver.py and run_launcher.py: the models forbid
  other keys, and the chart renders nothing for a key it does not know), and its run_launcher
  section, rendered as the chart's _run-launcher.tpl renders a CustomRunLauncher (module, class,
  config as YAML), is a valid Dagster instance config whose launcher loads: our
  CeleryRunLauncher with the broker and backend from the secret's variables;
- deploy/k8s-celery-workers.yaml is a list of valid Kubernetes Deployments (every key checked
  against the kubernetes client's models, as dagster-k8s checks container configs), one worker
  for the runs' queue and one per partition group, each serving the queue partition_queue routes
  its partitions to, with the chart's instance ConfigMap as dagster.yaml;
- deploy/compose/dagster-celery.yaml is a valid instance config with the same launcher, and the
  compose overlay's workers serve those queues.
A wrong key is refused in each check (the checks have teeth)."""
from __future__ import annotations

import os

import kubernetes
import pytest
import yaml
from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict

DEPLOY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "deploy")

#: the chart's top-level values (DagsterHelmValues) and the keys of the models we set under
#: dagsterDaemon / dagsterWebserver (Daemon, Webserver; both forbid extra keys), chart 1.13
CHART_TOP = {"dagsterWebserver", "dagster-user-deployments", "postgresql", "generatePostgresqlPasswordSecret",
             "generateCeleryConfigSecret", "rabbitmq", "redis", "flower", "ingress", "imagePullSecrets",
             "computeLogManager", "scheduler", "runLauncher", "pythonLogs", "dagsterDaemon", "busybox", "migrate",
             "telemetry", "serviceAccount", "global", "retention", "concurrency", "additionalInstanceConfig"}
CHART_DAEMON = {"schedulerName", "volumeMounts", "volumes", "enabled", "image", "runCoordinator", "heartbeatTolerance",
                "env", "envConfigMaps", "envSecrets", "deploymentLabels", "labels", "nodeSelector", "affinity",
                "tolerations", "podSecurityContext", "securityContext", "resources", "livenessProbe",
                "readinessProbe", "startupProbe", "annotations", "runMonitoring", "runRetries", "sensors", "schedules"}
CHART_WEBSERVER_SET = {"image", "envSecrets"}          # Webserver has both (and forbids unknown keys)
CHART_IMAGE = {"repository", "tag", "pullPolicy"}
#: what the chart's instance template reads from dagsterDaemon.runMonitoring
CHART_RUN_MONITORING = {"enabled", "startTimeoutSeconds", "maxResumeRunAttempts", "pollIntervalSeconds"}


def _yaml_docs(name: str) -> list:
    with open(os.path.join(DEPLOY, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _chart_errors(values: dict) -> list[str]:
    errors = [f"{k}: not a value of the Dagster chart" for k in set(values) - CHART_TOP]
    daemon, web = values.get("dagsterDaemon", {}), values.get("dagsterWebserver", {})
    errors += [f"dagsterDaemon.{k}: not a key of the chart's Daemon" for k in set(daemon) - CHART_DAEMON]
    errors += [f"dagsterWebserver.{k}: not set by this overlay's check" for k in set(web) - CHART_WEBSERVER_SET]
    for where, img in (("dagsterDaemon", daemon.get("image")), ("dagsterWebserver", web.get("image"))):
        if img is not None and set(img) - CHART_IMAGE:
            errors.append(f"{where}.image: {sorted(set(img) - CHART_IMAGE)} not keys of the chart's Image")
    errors += [f"dagsterDaemon.runMonitoring.{k}: the chart does not render it"
               for k in set(daemon.get("runMonitoring", {})) - CHART_RUN_MONITORING]
    rl = values.get("runLauncher", {})
    if rl.get("type") != "CustomRunLauncher" or set(rl["config"]["customRunLauncher"]) != {"module", "class", "config"}:
        errors.append(f"runLauncher: not a CustomRunLauncher with module, class and config: {rl}")
    return errors


def _rendered_instance(values: dict, tmp_path) -> str:
    """dagster.yaml with the run launcher as the chart renders a CustomRunLauncher."""
    custom = values["runLauncher"]["config"]["customRunLauncher"]
    text = ("storage:\n  postgres:\n    postgres_url: postgresql+psycopg2://u@h/db\n"
            f"run_launcher:\n  module: \"{custom['module']}\"\n  class: \"{custom['class']}\"\n  config:\n"
            + "".join("    " + line + "\n" for line in yaml.safe_dump(custom["config"]).splitlines()))
    (tmp_path / "dagster.yaml").write_text(text)
    return str(tmp_path)


def _launcher(home: str):
    from dagster._core.instance.config import dagster_instance_config
    from dagster._serdes import ConfigurableClassData
    conf, _ = dagster_instance_config(home)
    rl = conf["run_launcher"]
    return ConfigurableClassData(rl["module"], rl["class"], yaml.safe_dump(rl.get("config") or {})).rehydrate(object)


def test_helm_overlay_sets_chart_keys_and_its_run_launcher_loads(tmp_path, monkeypatch):
    (values,) = _yaml_docs("helm-values-celery.yaml")
    assert _chart_errors(values) == []
    assert values["dagsterDaemon"]["runMonitoring"]["maxResumeRunAttempts"] == 0     # retried, never resumed
    assert values["runLauncher"]["config"]["k8sRunLauncher"] is None                 # the base file's, dropped
    # the check has teeth: a key the chart does not have, at the top and in the daemon
    assert _chart_errors({**values, "extraManifests": []}) == ["extraManifests: not a value of the Dagster chart"]
    assert _chart_errors({**values, "dagsterDaemon": {**values["dagsterDaemon"], "replicas": 2}}) == \
        ["dagsterDaemon.replicas: not a key of the chart's Daemon"]

    monkeypatch.setenv("INCREMENTS_CELERY_BROKER", "pyamqp://guest:guest@broker.example:5672//")
    monkeypatch.setenv("INCREMENTS_CELERY_BACKEND", "redis://redis.example:6379/0")
    launcher = _launcher(_rendered_instance(values, tmp_path))
    from orchestration.celery import CeleryRunLauncher
    assert isinstance(launcher, CeleryRunLauncher)
    assert (launcher.broker, launcher.backend, launcher.default_queue) == (
        "pyamqp://guest:guest@broker.example:5672//", "redis://redis.example:6379/0", "increments-runs")
    assert not launcher.supports_resume_run and launcher.supports_check_run_worker_health
    bad = {**values, "runLauncher": {"type": "CustomRunLauncher", "config": {"customRunLauncher": {
        "module": "orchestration.celery", "class": "CeleryRunLauncher", "config": {"brokr": "x"}}}}}
    with pytest.raises(Exception, match="brokr"):
        _launcher(_rendered_instance(bad, tmp_path))


def _deployment_errors(doc: dict) -> list[str]:
    try:
        k8s_model_from_dict(kubernetes.client.V1Deployment, k8s_snake_case_dict(kubernetes.client.V1Deployment, doc))
    except Exception as e:  # noqa: BLE001 - the message is the finding
        return [str(e)]
    return []


def _queues(container: dict) -> list[str]:
    cmd = container["command"]
    assert cmd[:4] == ["python", "-m", "orchestration.celery", "worker"], cmd
    return cmd[cmd.index("-Q") + 1].split(",")


def test_worker_manifests_are_deployments_serving_each_queue_once():
    from orchestration.celery import RUN_QUEUE, STEP_QUEUE, partition_queue
    docs = _yaml_docs("k8s-celery-workers.yaml")
    assert [e for d in docs for e in _deployment_errors(d)] == []
    served = {}
    for d in docs:
        (c,) = d["spec"]["template"]["spec"]["containers"]
        served[d["metadata"]["name"]] = (_queues(c), d["spec"]["replicas"])
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        vols = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        assert vols[mounts["/opt/dagster/dagster_home/dagster.yaml"]]["configMap"]["name"] == "dagster-instance"
        env = {e["name"]: e for e in c["env"]}
        assert env["DAGSTER_HOME"]["value"] == "/opt/dagster/dagster_home"
        assert env["DAGSTER_PG_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "dagster-postgresql-secret"
    assert served["increments-celery-runs"][0] == [RUN_QUEUE]
    groups = [partition_queue(f"q.partition[p{p}]", 2) for p in range(2)]
    for g, queue in enumerate(groups):                 # one replica per partition group: its stores stay warm
        assert served[f"increments-celery-p{g}"] == ([queue, STEP_QUEUE], 1)
    # the check has teeth: a misspelt container key
    bad = yaml.safe_load(yaml.safe_dump(docs[0]))
    bad["spec"]["template"]["spec"]["containers"][0]["comand"] = ["x"]
    assert _deployment_errors(bad) and "comand" in _deployment_errors(bad)[0]


def test_compose_overlay_instance_and_workers(monkeypatch):
    from orchestration.celery import RUN_QUEUE, STEP_QUEUE, CeleryRunLauncher, partition_queue
    monkeypatch.setenv("DAGSTER_PG_URL", "postgresql+psycopg2://u@h/db")
    monkeypatch.setenv("INCREMENTS_CELERY_BROKER", "pyamqp://guest:guest@rabbitmq:5672//")
    monkeypatch.setenv("INCREMENTS_CELERY_BACKEND", "redis://redis:6379/0")
    import shutil
    import tempfile
    home = tempfile.mkdtemp()
    try:
        shutil.copy(os.path.join(DEPLOY, "compose", "dagster-celery.yaml"), os.path.join(home, "dagster.yaml"))
        assert isinstance(_launcher(home), CeleryRunLauncher)
    finally:
        shutil.rmtree(home)
    (compose,) = _yaml_docs("docker-compose.celery.yaml")
    svc = compose["services"]
    assert _queues(svc["worker-runs"]) == [RUN_QUEUE]
    for g in range(2):
        assert _queues(svc[f"worker-p{g}"]) == [partition_queue(f"q.partition[p{g}]", 2), STEP_QUEUE]

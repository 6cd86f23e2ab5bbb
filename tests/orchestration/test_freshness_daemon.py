"""The freshness sensor under the real daemon (PostgreSQL instance, dagster-daemon, webserver):
its AssetCheckEvaluation reaches the event log, and the UI's GraphQL shows the sink's `freshness`
check passing for a query that keeps up."""
from __future__ import annotations

from test_dagster_instance import wait_for


def _executions(d) -> list[dict]:
    res = d.gql("""{ assetCheckExecutions(assetKey: {path: ["delta", "lake", "sensor_copy"]}, checkName: "freshness",
                     limit: 3) { status evaluation { success description } } }""")
    return res["assetCheckExecutions"]


def test_freshness_sensor_reports_the_check(dagster_env):
    d = dagster_env["dagster"]
    execs = wait_for(lambda: _executions(d), 180, "a freshness evaluation from sensor sensor_copy_freshness", every=3)
    ev = execs[0]["evaluation"]
    assert execs[0]["status"] in ("SUCCEEDED", "FAILED")
    assert ev["description"]
    if ev["success"]:
        assert "caught up" in ev["description"] or "pending" in ev["description"]

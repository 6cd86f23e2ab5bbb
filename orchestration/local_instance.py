"""A real local Dagster instance for tests and benchmarks: `dagster-daemon run` and
`dagster-webserver` subprocesses on a DAGSTER_HOME, plus small GraphQL helpers.

    with LocalDagster(home, workspace_yaml, env={...}) as dg_:
        run_id = dg_.launch("my_query_batch")
        dg_.wait_run(run_id)

Processes get their own session; `stop()` ends exactly those process groups.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}


def timeout_scale() -> float:
    """Factor on the tests' wait limits ($INCREMENTS_TEST_TIMEOUT_SCALE): not a speed assertion."""
    return float(os.environ.get("INCREMENTS_TEST_TIMEOUT_SCALE", "1") or 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalDagster:
    def __init__(self, home: str, workspace: str, env: dict[str, str] | None = None, cwd: str | None = None,
                 location: str | None = None):
        self.home = home
        self.workspace = workspace
        self.env = {**os.environ, **(env or {}), "DAGSTER_HOME": home}
        self.cwd = cwd
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.location = location
        self.procs: list[subprocess.Popen] = []

    # -- processes ----------------------------------------------------------------------
    def start(self, timeout: float = 120) -> "LocalDagster":
        bindir = os.path.dirname(sys.executable)
        logs = os.path.join(self.home, "logs")
        os.makedirs(logs, exist_ok=True)
        for name, cmd in (("daemon", [os.path.join(bindir, "dagster-daemon"), "run", "-w", self.workspace]),
                          ("webserver", [os.path.join(bindir, "dagster-webserver"), "-w", self.workspace,
                                         "-h", "127.0.0.1", "-p", str(self.port)])):
            out = open(os.path.join(logs, f"{name}.log"), "w")
            self.procs.append(subprocess.Popen(cmd, env=self.env, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT,
                                               start_new_session=True))
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()          # a failed start must not leave a daemon running the sensors
            raise
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"dagster process {p.args[0]} exited ({p.returncode}); see {self.home}/logs")
            try:
                res = self.gql("{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus "
                               "locationOrLoadError { __typename ... on PythonError { message } } } } } }")
                entries = res["workspaceOrError"]["locationEntries"]
                last = entries
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    errs = [e for e in entries if e["locationOrLoadError"]["__typename"] == "PythonError"]
                    if errs:
                        raise RuntimeError(f"code location failed to load: {errs}")
                    self.location = self.location or entries[0]["name"]
                    return
            except OSError as e:             # not listening yet (URLError is an OSError)
                last = e
            time.sleep(0.5)
        raise TimeoutError(f"dagster webserver not ready after {timeout}s: {last}")

    def _descendants(self) -> list[int]:
        """Pids below our processes (code servers may start their own session, out of our groups)."""
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
        out, todo = [], [p.pid for p in self.procs]
        while todo:
            for c in children.get(todo.pop(), []):
                out.append(c)
                todo.append(c)
        return out

    def stop(self) -> None:
        below = self._descendants() if os.path.isdir("/proc") else []
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)
        for pid in below:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.procs.clear()

    def __enter__(self) -> "LocalDagster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- GraphQL ------------------------------------------------------------------------
    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        req = urllib.request.Request(f"{self.url}/graphql", method="POST",
                                     data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"GraphQL HTTP {e.code}: {e.read().decode(errors='replace')[:2000]}") from None
        if body.get("errors"):
            raise RuntimeError(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def launch(self, job: str, run_config: dict[str, Any] | None = None, tags: dict[str, str] | None = None) -> str:
        q = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
                 ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
                 ... on RunConfigValidationInvalid { errors { message } } ... on PipelineNotFoundError { message } } }"""
        p = {"selector": {"repositoryLocationName": self.location, "repositoryName": "__repository__", "jobName": job},
             "runConfigData": run_config or {},
             "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]}}
        res = self.gql(q, {"p": p})["launchRun"]
        if res["__typename"] != "LaunchRunSuccess":
            raise RuntimeError(f"launchRun {job}: {res}")
        return res["run"]["runId"]

    def materialize(self, asset_key: list[str]) -> str:
        """Launch a materialization of one asset as the asset graph's Materialize button does
        (Dagster's asset job, the asset selected, no partition, no config); the run id."""
        q = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
                 ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
                 ... on InvalidSubsetError { message } ... on PipelineNotFoundError { message } } }"""
        p = {"selector": {"repositoryLocationName": self.location, "repositoryName": "__repository__",
                          "jobName": "__ASSET_JOB", "assetSelection": [{"path": asset_key}], "assetCheckSelection": []},
             "runConfigData": {}, "mode": "default", "executionMetadata": {}}
        res = self.gql(q, {"p": p})["launchRun"]
        if res["__typename"] != "LaunchRunSuccess":
            raise RuntimeError(f"materialize {asset_key}: {res}")
        return res["run"]["runId"]

    def reexecute(self, run_id: str, strategy: str = "ALL_STEPS") -> str:
        """Re-execute a run as the run page's Re-execute button does; the new run's id."""
        q = """mutation($p: ReexecutionParams!) { launchPipelineReexecution(reexecutionParams: $p) { __typename
                 ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
        res = self.gql(q, {"p": {"parentRunId": run_id, "strategy": strategy}})["launchPipelineReexecution"]
        if res["__typename"] != "LaunchRunSuccess":
            raise RuntimeError(f"re-execute {run_id}: {res}")
        return res["run"]["runId"]

    def run_events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's event log as the run page shows it: __typename, level, stepKey, message, and
        for step failures failureMetadata.description."""
        q = """query($id: ID!, $c: String) { logsForRun(runId: $id, afterCursor: $c) { __typename
                 ... on EventConnection { cursor hasMore events { __typename
                 ... on MessageEvent { level stepKey message }
                 ... on ExecutionStepFailureEvent { failureMetadata { description } } } } } }"""
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            res = self.gql(q, {"id": run_id, "c": cursor})["logsForRun"]
            out.extend(res.get("events", []))
            if not res.get("hasMore"):
                return out
            cursor = res["cursor"]

    def run(self, run_id: str) -> dict[str, Any]:
        q = """query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { runId status startTime endTime
                 creationTime tags { key value } } } }"""
        res = self.gql(q, {"id": run_id})["runOrError"]
        res["tags"] = {t["key"]: t["value"] for t in res.get("tags", [])}
        return res

    def wait_run(self, run_id: str, timeout: float = 120) -> dict[str, Any]:
        """The run once it ended; `timeout` is scaled by $INCREMENTS_TEST_TIMEOUT_SCALE (default 1:
        a loaded, shared machine may need 3 or more)."""
        deadline = time.monotonic() + timeout * timeout_scale()
        while True:
            r = self.run(run_id)
            if r["status"] in TERMINAL:
                return r
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {r['status']} after {timeout}s")
            time.sleep(0.5)

    def runs(self, tags: dict[str, str] | None = None, limit: int = 200) -> list[dict[str, Any]]:
        q = """query($f: RunsFilter, $l: Int) { runsOrError(filter: $f, limit: $l) { ... on Runs { results {
                 runId jobName status creationTime startTime endTime tags { key value } } } } }"""
        f = {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]}
        out = self.gql(q, {"f": f, "l": limit})["runsOrError"]["results"]
        for r in out:
            r["tags"] = {t["key"]: t["value"] for t in r["tags"]}
        return out

    METADATA = """metadataEntries { label __typename
                   ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue }
                   ... on TextMetadataEntry { text } ... on JsonMetadataEntry { jsonString }
                   ... on TimestampMetadataEntry { timestamp } ... on PipelineRunMetadataEntry { runId }
                   ... on TableSchemaMetadataEntry { schema { columns { name type } } } }"""

    @staticmethod
    def _metadata(entries: list[dict[str, Any]]) -> dict[str, Any]:
        return {e["label"]: next((e[k] for k in ("intValue", "floatValue", "text", "jsonString", "timestamp", "runId",
                                                  "schema") if k in e), None) for e in entries}

    def materializations(self, asset_key: list[str], limit: int = 100, kind: str = "assetMaterializations"
                         ) -> list[dict[str, Any]]:
        """Materialization (or, kind="assetObservations", observation) events of an asset, newest
        first, with their partition and their metadata as a dict."""
        q = f"""query($k: AssetKeyInput!, $l: Int) {{ assetOrError(assetKey: $k) {{ __typename ... on Asset {{
                 {kind}(limit: $l) {{ runId timestamp partition description {self.METADATA} }} }} }} }}"""
        res = self.gql(q, {"k": {"path": asset_key}, "l": limit})["assetOrError"]
        return [{"runId": m["runId"], "timestamp": m["timestamp"], "partition": m["partition"],
                 "description": m["description"], "metadata": self._metadata(m["metadataEntries"])}
                for m in res.get(kind, [])]

    def check_executions(self, asset_key: list[str], check: str, limit: int = 10) -> list[dict[str, Any]]:
        """Executions of an asset check, newest first: status, success, description, metadata."""
        q = f"""query($k: AssetKeyInput!, $c: String!, $l: Int!) {{ assetCheckExecutions(assetKey: $k,
                 checkName: $c, limit: $l) {{ runId status evaluation {{ success description
                 {self.METADATA} }} }} }}"""
        out = []
        for e in self.gql(q, {"k": {"path": asset_key}, "c": check, "l": limit})["assetCheckExecutions"]:
            ev = e.get("evaluation") or {}
            out.append({"runId": e["runId"], "status": e["status"], "success": ev.get("success"),
                        "description": ev.get("description"), "metadata": self._metadata(ev.get("metadataEntries", []))})
        return out

    def sensor_ticks(self, sensor: str, limit: int = 10) -> list[dict[str, Any]]:
        """The sensor's recent ticks, newest first: status, skipReason, runIds."""
        q = """query($s: SensorSelector!, $l: Int) { sensorOrError(sensorSelector: $s) { __typename ... on Sensor {
                 sensorState { ticks(limit: $l) { status skipReason runIds timestamp } } } } }"""
        sel = {"repositoryLocationName": self.location, "repositoryName": "__repository__", "sensorName": sensor}
        res = self.gql(q, {"s": sel, "l": limit})["sensorOrError"]
        return res.get("sensorState", {}).get("ticks", [])

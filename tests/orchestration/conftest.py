"""A real Dagster instance for the orchestration tests: PostgreSQL storage (a fresh database per
session), `dagster-daemon run` and `dagster-webserver` subprocesses on free loopback ports, the
code location tests/orchestration/dagster_queries.py. Source files are written before start so the
sensor and the per-minute schedule begin draining at once."""
from __future__ import annotations

import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
from orch_testutil import ROWS_PER_FILE, create_db, drop_db, write_files  # noqa: E402


class Webhook:
    """A local HTTP server recording the JSON bodies POSTed to it (the halt webhook's receiver)."""

    def __init__(self):
        import http.server
        import threading
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


BAD_LINE = '{"id": 2, "name: broken}'


@pytest.fixture(scope="session")
def dagster_env(tmp_path_factory):
    from orchestration.home import prepare_home
    from orchestration.local_instance import LocalDagster
    root = str(tmp_path_factory.mktemp("orch"))
    dag_db, dag_url = create_db("inc_dagster")
    log_db, log_url = create_db("inc_log")
    home = os.path.join(root, "dagster_home")
    env = prepare_home(home, pg_url=dag_url.replace("postgresql+psycopg://", "postgresql+psycopg2://"))
    hook = Webhook()
    env.update(INCREMENTS_TEST_DIR=root, INCREMENTS_LOG_URL=log_url, PYTHONPATH=REPO, INCREMENTS_TEST_WEBHOOK=hook.url)
    ws = os.path.join(root, "workspace.yaml")
    with open(ws, "w") as f:
        f.write(f"load_from:\n  - python_file:\n      relative_path: {os.path.join(HERE, 'dagster_queries.py')}\n"
                f"      attribute: defs\n      working_directory: {REPO}\n      location_name: increments_test\n")
    expected = {q: write_files(root, q, 3) for q in ("sensor_copy", "drain_copy")}
    write_files(root, "bad_copy", 1)                      # batch 0 commits, batch 1 reads a bad file
    bad = os.path.join(root, "landing", "bad_copy", "part-0001.json")
    with open(bad, "w") as f:
        f.write(json.dumps({"id": 1000, "name": "ok"}) + "\n" + BAD_LINE + "\n")
    os.environ["INCREMENTS_TEST_DIR"] = root
    inst = LocalDagster(home, ws, env=env, cwd=REPO)
    inst.start(timeout=180)
    try:
        yield {"dagster": inst, "root": root, "log_url": log_url, "expected": expected, "env": env,
               "webhook": hook, "bad_file": bad}
    finally:
        inst.stop()
        hook.close()
        from increments.checkpoint.log import _ENGINES
        for u in [u for u in _ENGINES if u == log_url]:
            _ENGINES.pop(u).dispose()
        drop_db(dag_db)
        drop_db(log_db)

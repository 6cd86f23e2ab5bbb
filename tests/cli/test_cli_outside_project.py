"""`increments history <name>` run where the registered queries do not import says what to do."""
from __future__ import annotations

import os
import subprocess
import sys

BIN = os.path.join(os.path.dirname(sys.executable), "increments")


def test_history_by_name_outside_the_project_says_what_to_do(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "INCREMENTS_QUERIES")}
    r = subprocess.run([BIN, "history", "hourly_clicks"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "ModuleNotFoundError" not in r.stderr
    for hint in ("project directory", "INCREMENTS_QUERIES", "PYTHONPATH", "--log-url"):
        assert hint in r.stderr

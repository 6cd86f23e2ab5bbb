"""The README's demo (`bash dev.sh demo` = examples/demo.py) as a new user runs it: its closing
hint is a command that runs as printed, from where the demo ran, without activating the venv
(issue 26 item 7), and shows the demo's batches."""
from __future__ import annotations

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_demos_closing_hint_runs_as_printed(tmp_path):
    env = {**os.environ, "DEMO_DIR": str(tmp_path / "demo"),
           "PATH": "/usr/local/bin:/usr/bin:/bin"}          # a shell where the venv is not activated
    env.pop("INCREMENTS_LOG_URL", None)
    out = subprocess.run([sys.executable, os.path.join(REPO, "examples", "demo.py")], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    hint = [ln for ln in out.stdout.splitlines() if ln.startswith("batch history: ")]
    assert len(hint) == 1, out.stdout[-2000:]
    command = hint[0][len("batch history: "):]
    assert " history hourly_clicks --checkpoint " in command
    ran = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, (command, ran.stderr[-3000:])
    batches = sum(1 for ln in out.stdout.splitlines() if ln.startswith("batch "))
    assert batches >= 2
    rows = [ln for ln in ran.stdout.splitlines() if re.match(r"\|\s*\d+\s*\|", ln)]
    assert len(rows) >= batches - 1, ran.stdout         # one line per committed batch

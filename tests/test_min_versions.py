"""The suite's subset at the declared minimum versions (issue 34 item 7), inside the README's test
command: in CI (CI=true, as .ci/run is run) this runs `bash .ci/min-versions`, which installs every
floor of pyproject.toml exactly in .venv-min and runs the subset there. Elsewhere it is skipped
with the reason (run `bash .ci/min-versions` by hand, or INCREMENTS_MIN_VERSIONS=1)."""
from __future__ import annotations

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WANTED = os.environ.get("INCREMENTS_MIN_VERSIONS") or os.environ.get("CI", "").lower() == "true"


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(not WANTED, reason="runs in CI (CI=true) or with INCREMENTS_MIN_VERSIONS=1; by hand: "
                                       "bash .ci/min-versions (installs the floors in .venv-min)")
def test_the_subset_passes_at_the_declared_minimum_versions():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "VIRTUAL_ENV"))}
    env.pop("PYTHONPATH", None)               # the floors' venv, not this one's packages
    proc = subprocess.run(["bash", os.path.join(REPO, ".ci", "min-versions")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=3500)
    # pytest's summary is the last line of stdout; pip's build warnings go to stderr, so the two
    # streams are read apart (a tail of both together ended in pip's warnings and missed the summary)
    out_tail = "\n".join(proc.stdout.splitlines()[-40:])
    err_tail = "\n".join(proc.stderr.splitlines()[-20:])
    assert proc.returncode == 0, f".ci/min-versions failed (exit {proc.returncode}):\n{out_tail}\n{err_tail}"
    assert "dependencies at their declared minimum versions" in proc.stdout + proc.stderr, out_tail
    assert " passed" in out_tail and " failed" not in out_tail, f"{out_tail}\n{err_tail}"

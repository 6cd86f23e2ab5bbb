"""Dagster's private modules are reached from one module only (orchestration/dagster_internals.py),
for one release line: every private name it uses resolves on the installed Dagster, any other
release is refused when the code location loads, and so is a run coordinator that launches runs at
once (the drains' chain and the one-run-per-query rule need Dagster's run queue)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from orchestration import dagster_internals as di

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _private_dagster_imports(path: str) -> list[str]:
    tree = ast.parse(open(path).read(), path)
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "dagster" \
                and node.attr.startswith("_"):
            names = [f"dagster.{node.attr}"]
        found += [f"{os.path.relpath(path, REPO)}:{node.lineno}: {n}" for n in names
                  if n.startswith("dagster._")]
    return found


def test_no_module_but_dagster_internals_imports_dagster_private_modules():
    bad = []
    for top in ("orchestration", "increments", "state", "bench", "examples", "deploy"):
        for dirpath, _, files in os.walk(os.path.join(REPO, top)):
            for f in files:
                if f.endswith(".py") and not (top == "orchestration" and f == "dagster_internals.py"):
                    bad += _private_dagster_imports(os.path.join(dirpath, f))
    assert bad == [], "import these through orchestration/dagster_internals.py:\n" + "\n".join(bad)


def test_every_private_name_used_resolves_on_the_installed_dagster():
    assert di.missing_internals() == []
    assert di.version_problem() is None


def test_an_unsupported_dagster_is_refused_at_code_location_load(tmp_path):
    """A code location over increments' queries, with Dagster reporting 1.14.0: load fails, naming
    the version found, the supported range and what to install."""
    code = ("import dagster; dagster.__version__ = '1.14.0'\n"
            "from orchestration import build_definitions\n"
            "build_definitions([])\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": REPO}, timeout=120)
    assert res.returncode != 0
    assert "UnsupportedDagster" in res.stderr
    assert "dagster 1.14.0 is installed" in res.stderr and ">=1.13,<1.14" in res.stderr


def test_a_missing_private_name_is_named(monkeypatch):
    monkeypatch.setitem(di.INTERNALS, "Gone", "dagster._core.no_such_module:Gone")
    assert di.missing_internals() == ["Gone (dagster._core.no_such_module:Gone)"]
    assert "lacks what increments' orchestration uses: Gone" in di.version_problem()


@pytest.mark.parametrize("module,cls,refused", [
    ("dagster._core.run_coordinator", "DefaultRunCoordinator", True),
    ("dagster._core.run_coordinator.sync_in_memory_run_coordinator", "SyncInMemoryRunCoordinator", True),
    ("dagster._core.run_coordinator", "QueuedRunCoordinator", False),
    (None, None, False),                            # no section: Dagster's default, the queue
])
def test_a_run_coordinator_that_launches_at_once_is_refused_with_the_reason(tmp_path, monkeypatch, module, cls,
                                                                           refused):
    text = "telemetry:\n  enabled: false\n"
    if cls:
        text += f"run_coordinator:\n  module: {module}\n  class: {cls}\n"
    (tmp_path / "dagster.yaml").write_text(text)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    problem = di.coordinator_problem()
    if not refused:
        assert problem is None
        di.check_deployment()
        return
    assert f"run_coordinator {module}.{cls}" in problem and "QueuedRunCoordinator" in problem
    from orchestration import build_definitions
    with pytest.raises(di.UnsupportedDagster, match="one run per query is in flight"):
        build_definitions([])

"""Dependencies (issue 34 item 7): every runtime dependency has a floor (tested by .ci/min-versions)
and a ceiling at the next major of the tested version; requirements.lock (the tested versions, what
dev.sh and deploy/Dockerfile install) pins each declared dependency inside its range; the code
imports only distributions it declares: the shipped packages their runtime dependencies and extras,
the tests those and the dev extra (a module that another dependency happens to bring is no
declaration)."""
from __future__ import annotations

import ast
import os
import sys
import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = tomllib.load(open(os.path.join(REPO, "pyproject.toml"), "rb"))["project"]
RUNTIME = [Requirement(r) for r in PROJECT["dependencies"]]
EXTRAS = {k: [Requirement(r) for r in v] for k, v in PROJECT["optional-dependencies"].items()}
SHIPPED = ("increments", "state", "orchestration")


def _lock() -> dict[str, Version]:
    with open(os.path.join(REPO, "requirements.lock")) as f:
        pins = [line.strip().split("==") for line in f if line.strip() and not line.startswith("#")]
    return {canonicalize_name(n): Version(v) for n, v in pins}


def test_runtime_dependencies_have_a_floor_and_a_ceiling():
    for req in RUNTIME:
        ops = {s.operator for s in req.specifier}
        assert ops == {"=="} or ({">="} <= ops and ops & {"<", "<="}), \
            f"{req}: give it a floor (>=, tested by .ci/min-versions) and a ceiling (<, the next major)"


def test_the_lock_pins_every_declared_dependency_inside_its_range():
    lock = _lock()
    for req in RUNTIME + [r for name in ("dev", "celery", "pandas") for r in EXTRAS[name]]:
        name = canonicalize_name(req.name)
        assert name in lock, f"{req} is declared but not in requirements.lock: run python .ci/lock.py"
        assert req.specifier.contains(lock[name], prereleases=True), \
            f"requirements.lock pins {name}=={lock[name]}, outside {req}: test the new version, then .ci/lock.py"


def _imported_modules(top: str) -> dict[str, str]:
    """Top-level third-party modules imported anywhere under `top` -> one file importing it."""
    out: dict[str, str] = {}
    local = set(SHIPPED) | {"examples"} | _local_modules(os.path.join(REPO, "tests")) | \
        _local_modules(os.path.join(REPO, "examples"))
    for d, _, files in os.walk(os.path.join(REPO, top)):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(d, f)
            with open(path) as fh:
                tree = ast.parse(fh.read())
            for node in ast.walk(tree):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
                for name in names:
                    mod = name.split(".")[0]
                    if mod not in sys.stdlib_module_names and mod not in local:
                        out.setdefault(mod, os.path.relpath(path, REPO))
    return out


def _local_modules(root: str) -> set[str]:
    """The modules of a folder of the repository (tests/ is on sys.path; tests put examples/ there)."""
    return {os.path.splitext(f)[0] for _, _, files in os.walk(root) for f in files if f.endswith(".py")}


def _declared(reqs: list[Requirement]) -> set[str]:
    return {canonicalize_name(r.name) for r in reqs}


def _undeclared(top: str, declared: set[str]) -> list[str]:
    dists = metadata.packages_distributions()
    bad = []
    for mod, where in sorted(_imported_modules(top).items()):
        names = {canonicalize_name(d) for d in dists.get(mod, [])}
        if not names & declared:
            bad.append(f"{where} imports {mod} (distribution {sorted(names) or 'not installed'})")
    return bad


def test_shipped_code_imports_only_its_declared_dependencies():
    declared = _declared(RUNTIME + EXTRAS["celery"] + EXTRAS["pandas"])
    for top in SHIPPED:
        assert _undeclared(top, declared) == [], "declare it in pyproject.toml [project].dependencies or an extra"


def test_tests_import_only_declared_dependencies():
    declared = _declared(RUNTIME + EXTRAS["dev"])
    assert _undeclared("tests", declared) == [], "declare it in pyproject.toml's dev extra"

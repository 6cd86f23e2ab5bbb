"""The import rules of docs/architecture.md, checked in fresh interpreters (the test process itself
has long imported Dagster):

- the engine (`increments`, every module of it) and the state package (`state`) never import
  Dagster nor the orchestration package: only orchestration/ knows Dagster;
- `import increments` stays light: the planner's operators, DuckDB and the execution engine load
  when a query is built, not when the package is imported;
- the state package depends only on what lies below the engine (increments.storage, types, lazy,
  errors, ...), never on the engine, which imports it;
- the Dagster code location (`orchestration.definitions` over the example queries) loads without the
  engine's heavy libraries: DuckDB, pyarrow, deltalake, RocksDB, pyiceberg and the Kafka client load
  when an op runs (every launched run imports the code location again before its first op);
- every logical plan node type has a builder: Compiler.build's own (the stateless nodes) or the
  explicit table of plan/builders.py;
- an import inside a function says why (ruff's PLC0415 and a `# noqa: PLC0415 - <reason>`).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str, env: dict | None = None) -> str:
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_importing_increments_and_state_leaves_dagster_out():
    out = _run("import sys, increments, state\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dagster', 'orchestration')))")
    assert out == "[]"


def test_no_module_of_the_engine_or_the_state_package_imports_dagster():
    out = _run("import importlib, pkgutil, sys, increments, state\n"
               "names = [m.name for p in (increments, state) for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.')]\n"
               "for m in names: importlib.import_module(m)\n"
               "print(len(names), sorted({m.split('.')[0] for m in sys.modules} & {'dagster', 'orchestration'}))")
    count, leaked = out.split(" ", 1)
    assert int(count) > 50 and leaked == "[]"


def test_import_increments_does_not_load_the_planner_or_the_engine():
    out = _run("import sys, increments\n"
               "print(sorted(m for m in sys.modules if m.startswith(('increments.operators', 'increments.plan.compiler',\n"
               "             'increments.execution.query', 'increments.execution.steps', 'duckdb'))))")
    assert out == "[]"


#: what the state package uses of increments: the modules below the engine (the package root
#: itself imports only increments.malloc_arenas, the standard library's: its exports load on first use)
BELOW_STATE = ("increments", "increments.errors", "increments.identifiers", "increments.lazy", "increments.malloc_arenas",
               "increments.redaction", "increments.storage", "increments.types")


def test_state_depends_only_on_what_lies_below_it():
    """The engine imports state (operators, execution); state imports none of the engine: every
    module of state, imported in a fresh interpreter, loads of increments only BELOW_STATE (and
    storage's own modules), and those load nothing of state."""
    out = _run("import importlib, pkgutil, sys, state\n"
               "for m in pkgutil.walk_packages(state.__path__, 'state.'): importlib.import_module(m.name)\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] == 'increments'))")
    loaded = eval(out)
    assert "increments.storage" in loaded
    assert [m for m in loaded if m not in BELOW_STATE and not m.startswith("increments.storage.")] == []
    out = _run(f"import importlib, sys\nfor m in {BELOW_STATE!r}: importlib.import_module(m)\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] == 'state'))")
    assert out == "[]"


HEAVY = ("duckdb", "pyarrow", "numpy", "deltalake", "rocksdict", "pyiceberg", "confluent_kafka", "obstore")


def test_loading_the_code_location_leaves_the_engines_heavy_libraries_out(tmp_path):
    out = _run("import sys, orchestration.definitions as d\n"
               f"print(len(d.defs.jobs), sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))",
               env={"INCREMENTS_EXAMPLES_DIR": str(tmp_path), "INCREMENTS_QUERIES": "examples.queries"})
    jobs, loaded = out.split(" ", 1)
    assert int(jobs) >= 6 and loaded == "[]"


def test_a_function_level_import_says_why():
    """docs/architecture.md: project code imports at module level; an import inside a function
    carries `# noqa: PLC0415 - <reason>` (the cycle it breaks, the heavy module it keeps off the
    code location's import path, the one branch that needs it, or an optional extra). ruff's
    PLC0415 finds the ones without; the reason after the code is checked here."""
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "PLC0415",
                        "--output-format", "concise", "increments", "state", "orchestration"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "No module named ruff" not in r.stderr, "install the dev extra (pip install -e '.[dev]'): it holds ruff"
    assert r.returncode == 0, r.stdout + r.stderr
    bare = []
    for package in ("increments", "state", "orchestration"):
        for folder, _, names in os.walk(os.path.join(ROOT, package)):
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    with open(path, encoding="utf-8") as f:
                        for n, line in enumerate(f, 1):
                            code = line.partition("# noqa:")[2]
                            if "PLC0415" in code and not re.search(r"PLC0415\s*-\s*\S", code):
                                bare.append(f"{os.path.relpath(path, ROOT)}:{n}")
    assert bare == [], "say why after the code: # noqa: PLC0415 - <the cycle, or the heavy module kept off the path>"


def test_every_plan_node_type_has_a_builder():
    from increments.plan import nodes as n
    from increments.plan import udf_nodes
    from increments.plan.builders import BUILDERS
    built_by_the_compiler = {n.SourceNode, n.StaticNode, n.Select, n.Filter, n.WithColumn, n.Sort, n.Limit, n.Alias,
                             n.ParseJson, n.WithWatermark}
    node_types = {c for mod in (n, udf_nodes) for c in vars(mod).values()
                  if isinstance(c, type) and issubclass(c, n.Node) and c not in (n.Node, n.Unary)}
    assert set(BUILDERS) | built_by_the_compiler == node_types
    assert not set(BUILDERS) & built_by_the_compiler

"""The deploy recipe's code location as its image runs it: a user who does not own the tree (uid
nobody here, 10001 in the image) over a read-only copy of the repository, INCREMENTS_QUERIES=
examples.queries, the data and checkpoints on an S3 server (moto) and the batch log in PostgreSQL,
as deploy/docker-compose.yaml sets them. Demo files go in with `python examples/queries.py N`, the
code location loads (`dagster definitions validate`), a batch run commits, `increments history`
reads it from PostgreSQL, and nothing was written under the tree. Without INCREMENTS_EXAMPLES_DIR
the load is refused, naming the variable to set (rather than a PermissionError)."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pytest
import sqlalchemy as sa

import increments as inc
from increments import storage

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("increments", "state", "orchestration", "examples")

pytestmark = pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"),
                                reason="drops privileges to another user: needs root and setpriv (util-linux)")


def _tree_files(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files} | \
        {os.path.relpath(d, root) + "/" for d, _, _ in os.walk(root)}


@pytest.fixture
def image_like():
    """(tree, env, preexec): a read-only, root-owned copy of the packages (as COPY leaves them in the
    image) and a writable home, temp dir and DAGSTER_HOME owned by the unprivileged user."""
    user = pwd.getpwnam("nobody")
    base = tempfile.mkdtemp(prefix="inc-deploy-")
    os.chmod(base, 0o755)
    tree = os.path.join(base, "opt-increments")
    os.mkdir(tree)
    for p in PACKAGES:
        shutil.copytree(os.path.join(REPO, p), os.path.join(tree, p),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "data"))
    for d, dirs, files in os.walk(tree):
        for f in files:
            os.chmod(os.path.join(d, f), 0o444)
        os.chmod(d, 0o555)
    home = os.path.join(base, "home")
    for sub in ("", "dagster", "tmp"):
        os.makedirs(os.path.join(home, sub), exist_ok=True)
        os.chown(os.path.join(home, sub), user.pw_uid, user.pw_gid)
        os.chmod(os.path.join(home, sub), 0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INCREMENTS_", "DAGSTER_", "PYTEST"))}
    env.update(PYTHONPATH=tree, PYTHONDONTWRITEBYTECODE="1", HOME=home, TMPDIR=os.path.join(home, "tmp"),
               DAGSTER_HOME=os.path.join(home, "dagster"), INCREMENTS_QUERIES="examples.queries")

    # the unprivileged user keeps one capability: reading and searching any directory (this machine's
    # interpreter lives under /root, mode 700); it writes nothing it does not own, as in the image
    drop = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    try:
        yield tree, env, drop
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run(args, tree, env, drop, timeout=300):
    return subprocess.run(drop + args, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)


BATCH = """
import json, dagster as dg, increments
assert increments.__file__.startswith({tree!r}), increments.__file__
from orchestration.definitions import defs
inst = dg.DagsterInstance.get()
res = defs.get_job_def("clicks_bronze_batch").execute_in_process(instance=inst, raise_on_error=False)
run = inst.get_run_by_id(res.run_id)
print(json.dumps({{"status": run.status.value, "tags": dict(run.tags)}}))
"""


def test_example_queries_run_unprivileged_over_a_read_only_tree(image_like, s3_bucket, pg_url):
    tree, env, drop = image_like
    root = f"{s3_bucket}/examples"
    env.update(INCREMENTS_EXAMPLES_DIR=root, INCREMENTS_LOG_URL=pg_url)
    before = _tree_files(tree)
    py = sys.executable
    demo = _run([py, "examples/queries.py", "3"], tree, env, drop)
    assert demo.returncode == 0, demo.stderr
    assert len(storage.location(f"{root}/landing/clicks").list()) == 3

    load = _run([os.path.join(os.path.dirname(py), "dagster"), "definitions", "validate",
                 "-m", "orchestration.definitions", "-a", "defs"], tree, env, drop)
    assert load.returncode == 0, load.stdout + load.stderr

    out = _run([py, "-c", BATCH.format(tree=tree)], tree, env, drop)
    assert out.returncode == 0, out.stderr[-4000:]
    run = json.loads(out.stdout.strip().splitlines()[-1])
    assert (run["status"], run["tags"].get("increments/outcome")) == ("SUCCESS", "committed"), run
    # the batch (two files of 100 clicks: max_files_per_trigger=2) is in the Delta table on S3,
    # the checkpoint on S3 holds no SQLite log, and the log is PostgreSQL's
    assert inc.read.delta(f"{root}/lake/clicks_bronze").load().num_rows == 200
    chk = [o.name for o in storage.location(f"{root}/chk/clicks_bronze").list()]
    assert chk and not [n for n in chk if "sqlite" in n]
    eng = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    assert sa.inspect(eng).get_table_names()
    eng.dispose()
    hist = _run([py, "-m", "increments.cli", "history", "clicks_bronze"], tree, env, drop, timeout=120)
    assert hist.returncode == 0, hist.stderr
    rows = [line for line in hist.stdout.splitlines() if line.startswith("| 0 ")]
    assert rows and "| 200" in rows[0], hist.stdout
    assert _tree_files(tree) == before


def test_example_queries_refuse_a_read_only_tree_without_a_data_root(image_like):
    tree, env, drop = image_like
    out = _run([sys.executable, "-c", "import orchestration.definitions"], tree, env, drop)
    assert out.returncode != 0
    assert "INCREMENTS_EXAMPLES_DIR" in out.stderr and "cannot write" in out.stderr, out.stderr[-2000:]
    assert "PermissionError" not in out.stderr


def _yaml(name: str):
    import yaml
    with open(os.path.join(REPO, "deploy", name)) as f:
        return yaml.safe_load(f)


def test_the_recipes_give_the_example_queries_an_object_store_root_and_a_postgresql_log():
    env = _yaml("docker-compose.yaml")["x-increments-env"]
    assert env["INCREMENTS_QUERIES"].endswith("examples.queries}")
    assert env["INCREMENTS_EXAMPLES_DIR"].endswith("s3://increments/examples}")
    assert env["INCREMENTS_LOG_URL"].startswith("postgresql")
    dep = _yaml("helm-values.yaml")["dagster-user-deployments"]["deployments"][0]
    values = {e["name"]: e["value"] for e in dep["env"]}
    assert values["INCREMENTS_QUERIES"] == "examples.queries"
    assert values["INCREMENTS_EXAMPLES_DIR"].startswith("s3://")
    assert "increments-log" in [s["name"] for s in dep["envSecrets"]]          # INCREMENTS_LOG_URL
    with open(os.path.join(REPO, ".dockerignore")) as f:
        ignored = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    assert {".venv", "examples/data/", "demo_output/", "**/chk/"} <= ignored

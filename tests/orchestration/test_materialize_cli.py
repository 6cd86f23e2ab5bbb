"""`dagster asset materialize --select <sink key>` with no partition runs the query's next batch
(the command a user types; before, it stopped at "Asset has partitions, but no '--partition'
option was provided"). A throwaway SQLite DAGSTER_HOME, the tests' code location."""
from __future__ import annotations

import os
import subprocess
import sys

import dagster as dg

from orch_testutil import ROWS_PER_FILE, write_files

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def test_dagster_asset_materialize_select_runs_the_next_batch(tmp_path):
    root = str(tmp_path)
    home = os.path.join(root, "home")
    os.makedirs(home)
    open(os.path.join(home, "dagster.yaml"), "w").close()          # SQLite storage under DAGSTER_HOME
    write_files(root, "manual_copy", 2)
    env = {k: v for k, v in os.environ.items() if k != "INCREMENTS_LOG_URL"}
    env.update(DAGSTER_HOME=home, INCREMENTS_TEST_DIR=root, PYTHONPATH=REPO)
    cmd = [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize",
           "-f", os.path.join(HERE, "dagster_queries.py"), "-a", "defs", "--select", "files/lake/manual_copy"]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "--partition" not in out.stdout + out.stderr
    with dg.DagsterInstance.from_config(home) as inst:
        (run,) = inst.get_runs()
        assert run.status == dg.DagsterRunStatus.SUCCESS
        assert (run.tags["increments/outcome"], run.tags["increments/batch_id"]) == ("committed", "0")
        mat = inst.get_latest_materialization_event(dg.AssetKey(["files", "lake", "manual_copy"]))
        assert mat.run_id == run.run_id and mat.asset_materialization.metadata["batch_id"].value == "0"
    import increments as inc
    assert inc.read.parquet_sink(os.path.join(root, "lake", "manual_copy")).num_rows == ROWS_PER_FILE

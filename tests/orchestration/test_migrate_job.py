"""Dagster job `<q>_migrate` (orchestration/migrate.py): the backfill's drains show as observations
on the sink asset, the switch as one more; the sink then holds the changed query's result."""
from __future__ import annotations

import os
import sys

import dagster as dg

LIFECYCLE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "lifecycle")
sys.path.insert(0, LIFECYCLE)

from test_migrate import _env, _file, _old_query_ran, _rows, _run, _scratch  # noqa: E402


def test_migrate_job_shows_drains_and_switches(tmp_path, monkeypatch):
    inp = str(tmp_path / "in")
    old = _old_query_ran(tmp_path, monkeypatch, 4)
    import migrate_queries
    from orchestration.factory import make_spec
    from orchestration.migrate import make_migrate_job
    spec = make_spec(migrate_queries.changed, asset_root=str(tmp_path))
    job = make_migrate_job(spec)
    assert job.name == "revenue_migrate"
    inst = dg.DagsterInstance.ephemeral()
    res = job.execute_in_process(instance=inst, run_config={"ops": {"migrate": {"config": {
        "to": str(tmp_path / "chk_new")}}}})
    assert res.success
    obs = [e.event_specific_data.asset_observation for e in res.all_events
           if e.event_type_value == "ASSET_OBSERVATION"]
    states = [o.metadata["drain_state"].value for o in obs]
    assert states[-1] == "switched" and set(states[:-1]) == {"running"} and len(states) >= 2
    assert all(o.asset_key == spec.sink_key for o in obs)
    assert obs[-1].metadata["drain_batches"].value == 4            # max_files_per_trigger=1, 4 files
    _file(inp, 4)
    _run(_env(tmp_path, "chk_new", "out"), "changed")
    assert _rows(old["MIG_OUT"]) == _scratch(tmp_path)


def test_migrate_job_from_sink_shows_the_sink_drain_then_the_source(tmp_path, monkeypatch):
    """Run config backfill: from-sink (tests/lifecycle/test_migrate_from_sink.py): the drain over the
    old table is an observation with drain_phase "sink", the source drain one with "source", the
    switch the last; the table then holds the changed query's result over all the files, also those
    gone from the source."""
    from test_migrate_from_sink import _expected, _file as _fs_file, _old_ran, _rows as _fs_rows
    _old_ran(tmp_path, monkeypatch, 4, gone=2)
    _fs_file(str(tmp_path / "in"), 4)
    import from_sink_queries
    from orchestration.factory import make_spec
    from orchestration.migrate import make_migrate_job
    spec = make_spec(from_sink_queries.changed, asset_root=str(tmp_path))
    job = make_migrate_job(spec)
    res = job.execute_in_process(instance=dg.DagsterInstance.ephemeral(), run_config={"ops": {"migrate": {"config": {
        "to": str(tmp_path / "chk_new"), "backfill": "from-sink"}}}})
    assert res.success
    obs = [e.event_specific_data.asset_observation for e in res.all_events
           if e.event_type_value == "ASSET_OBSERVATION"]
    assert [o.metadata.get("drain_phase").value if "drain_phase" in o.metadata else None for o in obs] == \
        ["sink", "source", None]
    assert [o.metadata["drain_state"].value for o in obs] == ["running", "running", "switched"]
    assert obs[0].metadata["drain_batches"].value == 4 and obs[-1].metadata["drain_batches"].value == 5
    assert _fs_rows(str(tmp_path / "out")) == _expected(range(5))
    bad = make_migrate_job(spec).execute_in_process(
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
        run_config={"ops": {"migrate": {"config": {"to": str(tmp_path / "chk_x"), "backfill": "latest"}}}})
    assert not bad.success

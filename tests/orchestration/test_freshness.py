"""The sink's `freshness` check and sensor `<q>_freshness`, derived from the trigger, on a real
Dagster instance with batch runs executed in process: a query that keeps up is fresh (an idle one
too, however old its last write), a stalled one (work pending longer than the trigger allows, or
an AvailableNow tick with no drain) is stale, and it recovers once the batches run. The clock the
check reads is moved forward instead of waiting (no timing asserts)."""
from __future__ import annotations

import os

import dagster as dg

import increments as inc
from orch_testutil import write_files
from orchestration import build_definitions
from orchestration import freshness

HOUR_MS = 3600 * 1000


def _query(root: str, name: str, trigger: dict):
    def factory():
        return (inc.read_stream.files(os.path.join(root, "landing", name), format="json",
                                      schema="id BIGINT, name STRING", max_files_per_trigger=1)
                .write_stream.format("parquet").checkpoint_location(os.path.join(root, "chk", name))
                .query_name(name).trigger(**trigger))
    factory.__name__ = name
    return factory


def _defs(root: str, name: str, trigger: dict, **opts):
    return build_definitions([(_query(root, name, trigger), {"path": os.path.join(root, "lake", name),
                                                             "sensor_status": "stopped", **opts})], asset_root=root)


def _instance(tmp_path):
    os.makedirs(tmp_path / "dagster", exist_ok=True)
    return dg.instance_for_test(temp_dir=str(tmp_path / "dagster"))


class Clock:
    def __init__(self, monkeypatch):
        import time
        self.ms = int(time.time() * 1000)
        monkeypatch.setattr(freshness, "_now_ms", lambda: self.ms)


def _tick(defs, name: str, inst, cursor):
    sensor = defs.get_sensor_def(f"{name}_freshness")
    res = sensor(dg.build_sensor_context(instance=inst, cursor=cursor))
    evs = [e for e in (res.asset_events or []) if isinstance(e, dg.AssetCheckEvaluation)]   # not the observations
    return (evs[0] if evs else None), res.cursor


def _check_in_a_run(defs, name: str, sink: dg.AssetKey, inst):
    key = dg.AssetCheckKey(sink, "freshness")
    job = dg.Definitions.merge(defs, dg.Definitions(jobs=[dg.define_asset_job(
        "run_freshness", selection=dg.AssetSelection.checks(key))])).resolve_job_def("run_freshness")
    assert job.execute_in_process(instance=inst).success
    return inst.get_latest_asset_check_evaluation_record(key)


def test_processing_time_query_goes_stale_when_stalled_and_recovers(tmp_path, monkeypatch):
    root, name = str(tmp_path), "fresh_pt"
    clock = Clock(monkeypatch)
    defs = _defs(root, name, {"processing_time": "1 minute"}, freshness_grace="30 seconds")
    sink = dg.AssetKey(["files", "lake", name])
    batch = defs.get_job_def(f"{name}_batch")
    write_files(root, name, 1)
    with _instance(tmp_path) as inst:
        assert batch.execute_in_process(instance=inst).success
        ev, cur = _tick(defs, name, inst, None)
        assert ev.passed and "caught up" in ev.description and ev.asset_key == sink
        write_files(root, name, 1, start=1)                 # new data; no batch runs: a stalled query
        ev, cur = _tick(defs, name, inst, cur)
        assert ev is None                                   # still fresh, unchanged: nothing reported
        clock.ms += 300_000                                 # > 3 x 60 s + 30 s allowed
        ev, cur = _tick(defs, name, inst, cur)
        assert not ev.passed and ev.description.startswith("stale: work has been pending")
        assert ev.severity == dg.AssetCheckSeverity.WARN
        rec = _check_in_a_run(defs, name, sink, inst)       # the check itself, run from the UI
        assert rec.event.dagster_event.event_specific_data.passed is False
        assert batch.execute_in_process(instance=inst).success   # the query runs again
        ev, cur = _tick(defs, name, inst, cur)
        assert ev.passed and "caught up" in ev.description
        clock.ms += 24 * HOUR_MS                            # idle for a day: no new data, still fresh
        ev, cur = _tick(defs, name, inst, cur)
        assert ev is None or ev.passed
        rec = _check_in_a_run(defs, name, sink, inst)
        assert rec.event.dagster_event.event_specific_data.passed is True


def _drain(defs, name: str, inst) -> None:
    """Start an AvailableNow drain and run its batches in process until it is done."""
    from increments.checkpoint.drains import DrainLog
    from orchestration import runner
    assert defs.get_job_def(f"{name}_available_now").execute_in_process(instance=inst).success
    for _ in range(10):
        rt = runner.build_runtime(defs_factory[name], defs_factory[name + ":path"], staging="memory")
        try:
            drain = DrainLog.for_runtime(rt).active()
            nxt, _ = runner.next_batch_id(rt)
        finally:
            runner.close_quietly(rt)
        if drain is None:
            return
        tags = {"increments/batch_id": str(nxt), "increments/drain_id": drain.drain_id}   # as the sensor's request
        defs.resolve_job_def(f"{name}_batch").execute_in_process(instance=inst, tags=tags)
    raise AssertionError("the drain did not finish")


def _latest_drain_ms(name: str) -> int:
    from increments.checkpoint.drains import DrainLog
    from orchestration import runner
    rt = runner.build_runtime(defs_factory[name], defs_factory[name + ":path"], staging="memory")
    try:
        return DrainLog.for_runtime(rt).recent(1)[0].created_at
    finally:
        runner.close_quietly(rt)


defs_factory: dict = {}


def test_available_now_query_is_stale_when_a_tick_has_no_drain(tmp_path, monkeypatch):
    root, name = str(tmp_path), "fresh_an"
    clock = Clock(monkeypatch)
    trigger = {"available_now": True}
    defs = _defs(root, name, trigger, cron_schedule="0 * * * *", freshness_grace="5 minutes",
                 schedule_status="stopped")
    defs_factory[name] = _query(root, name, trigger)
    defs_factory[name + ":path"] = os.path.join(root, "lake", name)
    write_files(root, name, 2)
    with _instance(tmp_path) as inst:
        _drain(defs, name, inst)
        ev, cur = _tick(defs, name, inst, None)
        assert ev.passed and "caught up" in ev.description
        write_files(root, name, 1, start=2)                 # waits for the next tick's drain
        ev, cur = _tick(defs, name, inst, cur)
        assert ev is None                                   # the drain of this hour already ran: fresh
        drain_ms = _latest_drain_ms(name)                   # the drain's own (real) clock, not the test's
        clock.ms = (drain_ms // HOUR_MS + 2) * HOUR_MS + 5 * 60_000 + 1000   # a later tick + grace, no drain
        ev, cur = _tick(defs, name, inst, cur)
        assert not ev.passed and "no AvailableNow drain started" in ev.description
        _drain(defs, name, inst)                            # the drain runs (late): caught up again
        ev, cur = _tick(defs, name, inst, cur)
        assert ev.passed and "caught up" in ev.description


def test_rules_derived_from_the_trigger(tmp_path):
    root = str(tmp_path)
    pt = _defs(root, "r1", {"processing_time": "10 minutes"})
    check = [c for c in pt.asset_checks if "freshness" in str(c.check_keys)][0]
    (key,) = check.check_keys
    assert key.name == "freshness"
    spec_desc = check.get_spec_for_check_key(key).description
    assert "processed within 2100 s" in spec_desc          # 3 x 600 s + 300 s grace
    an = _defs(root, "r2", {"available_now": True}, cron_schedule="30 2 * * *")
    assert "'30 2 * * *'" in an.get_sensor_def("r2_freshness").description


def test_a_tick_before_the_query_or_instance_existed_is_not_held_against_it(tmp_path, monkeypatch):
    """A daily AvailableNow query whose schedule's latest tick came 10 minutes before it (and the
    instance watching it) existed is not stale at once; the next tick without a drain is."""
    import datetime as dt
    from orchestration import runner
    root, name = str(tmp_path), "fresh_new"
    clock = Clock(monkeypatch)
    trigger = {"available_now": True}
    write_files(root, name, 1)                              # pending work, no drain ever
    rt = runner.build_runtime(_query(root, name, trigger), os.path.join(root, "lake", name), staging="memory")
    try:
        created = rt.meta.created_at_ms                     # the checkpoint exists from here on
    finally:
        runner.close_quietly(rt)
    tick = dt.datetime.fromtimestamp(created / 1000 - 600, tz=dt.timezone.utc)
    defs = _defs(root, name, trigger, cron_schedule=f"{tick.minute} {tick.hour} * * *",
                 freshness_grace="5 minutes", schedule_status="stopped")
    clock.ms = created + 60_000                             # the tick was 11 minutes ago, grace 5
    with _instance(tmp_path) as inst:
        ev, cur = _tick(defs, name, inst, None)
        assert ev.passed and "came before this query" in ev.description
        clock.ms = created + 24 * HOUR_MS                   # the next day's tick + 10 minutes, no drain
        ev, cur = _tick(defs, name, inst, cur)
        assert not ev.passed and "no AvailableNow drain started" in ev.description

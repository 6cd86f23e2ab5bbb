"""Under Dagster, a file that changed after its batch read it is found also when no new file
arrives (issue 28 item 1): the trigger sensor asks each source for such changes at every tick (the
same window check a plan makes), so a single growing file is not left unnoticed behind "no new data".
With fail_on_data_loss (the default) the sensor requests a run; its plan fails naming the file and
the query halts, the sensor's skip reason naming it. With fail_on_data_loss=False no run is
requested for it; the skip reason names the file. A real (ephemeral) Dagster instance, runs in
process, sensor ticks evaluated as the daemon would."""
from __future__ import annotations

import json
import os

import dagster as dg

import increments as inc
from orchestration import build_definitions
from orchestration.sensors import halt_state


def _query(root: str, name: str, path: str, **source):
    def factory():
        frame = inc.read_stream.files(path, format="json", schema="id BIGINT", **source)
        return (frame.write_stream.format("parquet").output_mode("append")
                .checkpoint_location(os.path.join(root, "chk", name)).query_name(name)
                .trigger(processing_time="1 minute"))
    factory.__name__ = name
    return factory


def _write(path: str, ids, mode: str = "w") -> None:
    with open(path, mode) as f:
        f.write("".join(json.dumps({"id": i}) + "\n" for i in ids))


def _defs(root, name, path, **source):
    return build_definitions([(_query(root, name, path, **source),
                               {"path": os.path.join(root, "lake", name), "max_retries": 0,
                                "sensor_status": "stopped"})], asset_root=root)


def test_a_single_growing_file_fails_a_run_the_sensor_requests(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "landing"))
    single = os.path.join(root, "landing", "events.json")
    _write(single, range(10))
    defs = _defs(root, "grow", single)
    sensor, job = defs.get_sensor_def("grow_trigger"), defs.get_job_def("grow_batch")
    with dg.DagsterInstance.ephemeral() as inst:
        assert sensor.evaluate_tick(dg.build_sensor_context(instance=inst)).run_requests
        run = inst.get_run_by_id(job.execute_in_process(instance=inst).run_id)
        assert run.tags["increments/outcome"] == "committed"
        res = sensor.evaluate_tick(dg.build_sensor_context(instance=inst))
        assert not res.run_requests and "no new data" in res.skip_message
        _write(single, range(10, 40), mode="a")          # 30 rows no batch would read
        res = sensor.evaluate_tick(dg.build_sensor_context(instance=inst))
        assert res.run_requests, res.skip_message
        failed = job.execute_in_process(instance=inst, raise_on_error=False)
        assert not failed.success
        run = inst.get_run_by_id(failed.run_id)
        assert run.tags["increments/outcome"] == "failed"
        assert f"file {single} changed after the previous batch read it" in run.tags["increments/error"]
        halt = halt_state(inst, defs.get_sensor_def("grow_trigger") and _Spec("grow"))
        assert halt and single in halt["error"]
        res = sensor.evaluate_tick(dg.build_sensor_context(instance=inst))
        assert not res.run_requests and "HALTED" in res.skip_message and single in res.skip_message


def test_a_file_changed_batches_ago_is_found_by_the_sensor(tmp_path):
    """a.json read by batch 0, b.json by batch 1, then a.json grows and no file arrives."""
    root = str(tmp_path)
    landing = os.path.join(root, "landing")
    os.makedirs(landing)
    _write(os.path.join(landing, "a.json"), range(10))
    defs = _defs(root, "older", landing, max_files_per_trigger=1)
    sensor, job = defs.get_sensor_def("older_trigger"), defs.get_job_def("older_batch")
    with dg.DagsterInstance.ephemeral() as inst:
        job.execute_in_process(instance=inst)
        _write(os.path.join(landing, "b.json"), range(10, 20))
        assert inst.get_run_by_id(job.execute_in_process(instance=inst).run_id).tags["increments/outcome"] == "committed"
        assert "no new data" in sensor.evaluate_tick(dg.build_sensor_context(instance=inst)).skip_message
        _write(os.path.join(landing, "a.json"), range(100, 130), mode="a")
        assert sensor.evaluate_tick(dg.build_sensor_context(instance=inst)).run_requests
        failed = job.execute_in_process(instance=inst, raise_on_error=False)
        error = inst.get_run_by_id(failed.run_id).tags["increments/error"]
        assert "a.json changed after the batch of seen-files entry 0 read it" in error


def test_with_fail_on_data_loss_false_the_skip_reason_names_the_file(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "landing"))
    single = os.path.join(root, "landing", "events.json")
    _write(single, range(10))
    defs = _defs(root, "lenient", single, fail_on_data_loss=False)
    sensor, job = defs.get_sensor_def("lenient_trigger"), defs.get_job_def("lenient_batch")
    with dg.DagsterInstance.ephemeral() as inst:
        job.execute_in_process(instance=inst)
        _write(single, range(10, 40), mode="a")
        res = sensor.evaluate_tick(dg.build_sensor_context(instance=inst))
        assert not res.run_requests                     # a run would read nothing: the rows stay unread
        assert "no new data" in res.skip_message and single in res.skip_message
        assert "changed after" in res.skip_message and "fail_on_data_loss=False" in res.skip_message


def test_with_no_window_the_skip_reason_names_the_file(tmp_path):
    """changed_files_window=0: no plan checks the files read (the next batch's read step checks the
    previous batch's): a run would find nothing to do, so the sensor only names the file."""
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "landing"))
    single = os.path.join(root, "landing", "events.json")
    _write(single, range(10))
    defs = _defs(root, "nowindow", single, changed_files_window=0)
    sensor, job = defs.get_sensor_def("nowindow_trigger"), defs.get_job_def("nowindow_batch")
    with dg.DagsterInstance.ephemeral() as inst:
        job.execute_in_process(instance=inst)
        _write(single, range(10, 40), mode="a")
        res = sensor.evaluate_tick(dg.build_sensor_context(instance=inst))
        assert not res.run_requests
        assert f"file {single} changed after the previous batch read it" in res.skip_message
        assert "changed_files_window=0" in res.skip_message


class _Spec:
    def __init__(self, name):
        self.key = self.name = name


def test_ticks_check_another_slice_of_the_older_files_each_time(tmp_path, monkeypatch):
    """Beyond the most recent files, a tick checks one slice of the older files (as a plan does);
    each tick's slice starts at a random place, so a change among the older files is found within
    a few ticks (with 4 older files and slices of 1 here: 1 in 4 per tick)."""
    import random

    from increments.sources import read_files_window as W
    monkeypatch.setattr(W, "RECENT", 2)
    monkeypatch.setattr(W, "SLICE", 1)
    root = str(tmp_path)
    landing = os.path.join(root, "landing")
    os.makedirs(landing)
    for i in range(6):                                   # one batch: f0..f5; f4, f5 the recent ones
        _write(os.path.join(landing, f"f{i}.json"), range(i * 10, i * 10 + 10))
    defs = _defs(root, "slices", landing)
    sensor, job = defs.get_sensor_def("slices_trigger"), defs.get_job_def("slices_batch")
    random.seed(28)
    with dg.DagsterInstance.ephemeral() as inst:
        job.execute_in_process(instance=inst)
        _write(os.path.join(landing, "f2.json"), range(100, 130), mode="a")
        ticks = 0
        while not sensor.evaluate_tick(dg.build_sensor_context(instance=inst)).run_requests:
            ticks += 1
            assert ticks < 40, "no tick checked f2.json"

"""A halt webhook that fails is logged without the credentials its URL carries (issue 28.7)."""
from __future__ import annotations

import dagster as dg

import increments as inc
from orchestration.factory import query_definitions


def test_failing_halt_webhook_is_logged_without_its_token(tmp_path, capfd):
    def query():
        return (inc.read_stream.files(str(tmp_path / "in"), "json", "id BIGINT").write_stream.format("parquet")
                .query_name("hooked").checkpoint_location(str(tmp_path / "chk")))
    url = "http://user:HOOKPASS@127.0.0.1:9/hook?token=HOOKTOKEN123&channel=ops"   # port 9: refused
    defs = query_definitions(query, path=str(tmp_path / "out"), halt_webhook=url, max_retries=0)
    job = defs.get_job_def("hooked_batch")
    sensor = defs.get_sensor_def("hooked_trigger")
    with dg.instance_for_test() as instance:        # the query's last batch run failed for good
        run = instance.create_run_for_job(job, tags={"increments/query": "hooked", "increments/batch_id": "3",
                                                     "increments/error": "boom", "dagster/will_retry": "false"})
        instance.report_run_failed(run)
        result = sensor(dg.build_sensor_context(instance=instance))
    assert "is HALTED at batch 3" in result.skip_message
    logged = capfd.readouterr().err                  # the sensor's log (Dagster's console handler)
    failed = [line for line in logged.splitlines() if "halt webhook" in line]
    assert failed, logged
    assert "HOOKTOKEN123" not in logged and "HOOKPASS" not in logged
    assert "halt webhook http://user:***@127.0.0.1:9/hook?token=***&channel=ops failed" in failed[0]

"""Watermark lag: the progress field event_time.watermark_lag_ms (batch timestamp - watermark) and
the Dagster asset check watermark_lag with its threshold option max_watermark_lag; per-operator
state rows and memory in the state_rows check's metadata."""
from __future__ import annotations

import datetime as dt
import json
import os

import dagster as dg

import increments as inc
from increments import functions as F
from increments.durations import parse_duration_ms
from increments.watermark import format_ts_ms
from orchestration import build_definitions

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)     # event times long before the batches run


def _input(d: str, files: int = 2) -> None:
    os.makedirs(d, exist_ok=True)
    for f in range(files):
        with open(os.path.join(d, f"clicks-{f:03d}.json"), "w") as fh:
            for i in range(10):
                t = (T0 + dt.timedelta(minutes=f * 30 + i)).isoformat().replace("+00:00", "Z")
                fh.write(json.dumps({"campaign_id": f"c{i % 3}", "event_time": t}) + "\n")


def _writer(root: str, name: str, trigger: dict, **opts):
    s = inc.read_stream.files(os.path.join(root, "in"), "json", "campaign_id STRING, event_time TIMESTAMP",
                              max_files_per_trigger=1)
    w = (s.with_watermark("event_time", "5 minutes").group_by(F.window("event_time", "10 minutes"), "campaign_id")
         .count().write_stream.format("delta").output_mode("append").query_name(name)
         .checkpoint_location(os.path.join(root, "chk", name)).trigger(**trigger))
    for k, v in opts.items():
        w = w.option(k, v)
    return w


def test_progress_reports_watermark_lag(tmp_path):
    root = str(tmp_path)
    _input(os.path.join(root, "in"))
    q = _writer(root, "local", {"available_now": True}).start(os.path.join(root, "out"))
    q.await_termination()
    first, last = q.recent_progress[0], q.recent_progress[-1]
    assert "watermark_lag_ms" not in first["event_time"]          # no watermark before any event time
    assert last["watermark_ms"] > 0
    ts = int(dt.datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00")).timestamp() * 1000)
    assert last["event_time"]["watermark_lag_ms"] == ts - last["watermark_ms"]
    assert last["event_time"]["watermark"] == format_ts_ms(last["watermark_ms"])


def _latest_check(inst, key: dg.AssetKey, rule: str):
    ck = dg.AssetCheckKey(key, rule)
    ev = inst.event_log_storage.get_latest_asset_check_execution_by_key([ck])[ck].event
    return ev.dagster_event.event_specific_data


def _run_two_batches(root: str, name: str, **opts):
    _input(os.path.join(root, "in"))
    q = lambda: _writer(root, name, {"processing_time": "1 minute"}, **opts)  # noqa: E731
    q.__name__ = name
    defs = build_definitions([(q, {"path": os.path.join(root, "lake"), "sensor_status": "stopped"})],
                             asset_root=root)
    job = defs.get_job_def(f"{name}_batch")
    inst = dg.DagsterInstance.ephemeral()
    job.execute_in_process(instance=inst)           # batch 0: no watermark yet
    sink = next(k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[-1] == "lake")
    first = _latest_check(inst, sink, "watermark_lag")
    job.execute_in_process(instance=inst)           # batch 1 runs with the watermark batch 0 moved
    return defs, inst, sink, first


def test_watermark_lag_check_fails_over_its_threshold(tmp_path):
    defs, inst, sink, first = _run_two_batches(str(tmp_path), "lagging", max_watermark_lag="1 hour")
    assert first.passed and "watermark_lag_ms" not in first.metadata
    ev = _latest_check(inst, sink, "watermark_lag")
    md = {k: getattr(v, "value", v) for k, v in ev.metadata.items()}
    assert ev.passed is False
    assert md["batch_id"] == "1" and md["max_watermark_lag_ms"] == parse_duration_ms("1 hour")
    assert md["watermark_lag_ms"] > parse_duration_ms("1 hour")         # event times from 2026-01-01
    wm = dt.datetime.fromisoformat(md["watermark"].replace("Z", "+00:00"))
    ts = dt.datetime.fromisoformat(md["batch_timestamp"].replace("Z", "+00:00"))
    assert md["watermark_lag_ms"] == int((ts - wm).total_seconds() * 1000)
    assert wm == T0 + dt.timedelta(minutes=9) - dt.timedelta(minutes=5)  # max event time of file 0 - delay
    # the per-operator state figures in state_rows
    st = {k: getattr(v, "value", v) for k, v in _latest_check(inst, sink, "state_rows").metadata.items()}
    mem = {k: v for k, v in st.items() if k.startswith("memory_used_bytes[")}
    assert list(mem) == ["memory_used_bytes[0:stateStoreSave]"] and mem["memory_used_bytes[0:stateStoreSave]"] > 0
    assert st["state_memory_used_bytes"] == sum(mem.values())
    assert st["state_rows[0:stateStoreSave]"] == st["state_rows_total"] > 0
    # the asset check itself, run on demand (as from the UI), re-evaluates from the log
    check_def = next(c for c in defs.asset_checks if any(k.name == "watermark_lag" for k in c.check_keys))
    result = check_def.node_def.compute_fn.decorated_fn()
    assert result.passed is False and result.metadata["watermark_lag_ms"].value == md["watermark_lag_ms"]

def test_watermark_lag_check_passes_under_threshold_and_when_unset(tmp_path):
    _, inst, sink, _ = _run_two_batches(str(tmp_path / "a"), "generous", max_watermark_lag="1000 days")
    ev = _latest_check(inst, sink, "watermark_lag")
    assert ev.passed and ev.metadata["max_watermark_lag_ms"].value == parse_duration_ms("1000 days")
    _, inst, sink, _ = _run_two_batches(str(tmp_path / "b"), "unset")
    ev = _latest_check(inst, sink, "watermark_lag")
    assert ev.passed and "max_watermark_lag_ms" not in ev.metadata and ev.metadata["watermark_lag_ms"].value > 0

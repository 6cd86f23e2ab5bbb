"""The public names of shared/API.md exist with the documented call shapes (the acceptance suite
drives exactly these)."""
from __future__ import annotations

import inspect

import increments as inc
from increments import functions as F


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_sources_and_static_reads():
    assert _params(inc.read_stream.files)[:4] == ["path", "format", "schema", "max_files_per_trigger"]
    assert _params(inc.read_stream.kafka)[:6] == ["bootstrap_servers", "topic", "topics", "starting_offsets",
                                                  "max_offsets_per_trigger", "fail_on_data_loss"]
    assert _params(inc.read_stream.delta)[:2] == ["path", "max_files_per_trigger"]
    mem = inc.read_stream.memory("k STRING, v BIGINT")
    assert callable(mem.add_data)
    assert callable(inc.read.delta) and callable(inc.read.files)


def test_frame_methods_and_functions():
    f = inc.read_stream.memory("k STRING, v BIGINT, t TIMESTAMP")
    for name in ("select", "filter", "where", "with_column", "parse_json", "with_watermark", "group_by",
                 "drop_duplicates", "drop_duplicates_within_watermark", "alias", "join", "write_stream"):
        assert hasattr(f, name), name
    g = f.group_by(F.window("t", "10 minutes", slide="5 minutes"), "k")
    assert hasattr(g, "count") and hasattr(g, "agg") and hasattr(g, "transform_with_state")
    assert F.window("t", "1 hour").slide_ms == 3_600_000 and F.session_window("t", "5 minutes").gap_ms == 300_000
    assert F.count().output_name == "count" and F.sum("x").alias("total").output_name == "total"
    for agg in (F.min, F.max, F.avg, F.first, F.last):
        assert agg("x").column == "x"


def test_writer_and_query_surface(tmp_path):
    f = inc.read_stream.memory("k STRING, v BIGINT")
    w = (f.write_stream.format("memory").output_mode("append").option("state_store", "memory")
         .checkpoint_location(str(tmp_path / "chk")).query_name("api_contract").trigger(processing_time="1 second"))
    for name in ("trigger", "foreach_batch", "start"):
        assert hasattr(w, name)
    q = w.start()
    try:
        for name in ("id", "run_id", "name", "is_active", "last_progress", "recent_progress"):
            getattr(q, name)
        f.add_data([("a", 1)])
        q.process_all_available()
        assert q.exception() is None and q.last_progress["batch_id"] == 0
    finally:
        q.stop()
    assert q.await_termination(timeout=5) is True and not q.is_active

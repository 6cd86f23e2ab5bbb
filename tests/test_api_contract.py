"""The public names of /work/shared/API.md exist with the documented call shapes (the acceptance suite
drives exactly these): each documented call is callable, takes the documented parameters in the
documented order with the documented defaults, and the query surface has the documented types
and progress keys. What each call does is tested where it is implemented."""
from __future__ import annotations

import inspect

import pytest

import increments as inc
from increments import functions as F
from increments.api.frame import StreamFrame

_EMPTY = inspect.Parameter.empty
VAR = "*"          # marks a *args parameter in a shape


def shape(fn) -> list:
    """fn's parameters as API.md writes them: name, (name, default), or '*name' for *args; **kwargs left out."""
    assert callable(fn), fn
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL:
            out.append(VAR + p.name)
        else:
            out.append(p.name if p.default is _EMPTY else (p.name, p.default))
    return out


def starts_with(fn, documented: list) -> None:
    """The documented parameters come first, in order, with their defaults (more may follow; a
    parameter documented without a default may have gained one: calls written as documented still work)."""
    got = shape(fn)[:len(documented)]
    got = [g[0] if isinstance(g, tuple) and isinstance(d, str) else g for g, d in zip(got, documented)]
    assert got == documented, f"{fn.__qualname__}{inspect.signature(fn)}"


def has_defaults(fn, **defaults) -> None:
    params = inspect.signature(fn).parameters
    assert {k: params[k].default for k in defaults if k in params} == defaults, f"{fn.__qualname__}{inspect.signature(fn)}"


def takes_varargs(fn) -> None:
    assert any(str(p).startswith(VAR) for p in shape(fn)), f"{fn.__qualname__}{inspect.signature(fn)}"


def test_sources_and_static_reads():
    starts_with(inc.read_stream.files, ["path", ("format", "json"), ("schema", None), ("max_files_per_trigger", None)])
    starts_with(inc.read_stream.kafka, ["bootstrap_servers", ("topic", None), ("topics", None),
                                        ("starting_offsets", "earliest"), ("max_offsets_per_trigger", None),
                                        ("fail_on_data_loss", True)])
    starts_with(inc.read_stream.delta, ["path", ("max_files_per_trigger", None)])
    has_defaults(inc.read_stream.delta, read_change_feed=False, starting_version=None)
    starts_with(inc.read_stream.memory, ["schema"])
    starts_with(inc.read_stream.memory("k STRING, v BIGINT").add_data, ["rows"])
    starts_with(inc.read.delta, ["path"])
    starts_with(inc.read.files, ["path", ("format", "parquet"), ("schema", None)])
    assert callable(inc.read_stream.iceberg) and callable(inc.read.iceberg)
    starts_with(inc.dead_letter.delta, ["path"])


@pytest.fixture
def frame():
    return inc.read_stream.memory("k STRING, v BIGINT, t TIMESTAMP, tags ARRAY<STRING>")


def test_frame_transformations(frame):
    for name in ("select", "group_by"):
        takes_varargs(getattr(frame, name))
    starts_with(frame.filter, ["condition"])
    starts_with(frame.where, ["condition"])
    starts_with(frame.with_column, ["name", "expr"])
    starts_with(frame.parse_json, ["schema", ("column", "value")])
    starts_with(frame.with_watermark, ["column", "delay"])
    has_defaults(frame.with_watermark, late_rows=None)
    starts_with(frame.drop_duplicates, [("subset", None)])
    starts_with(frame.drop_duplicates_within_watermark, ["subset"])
    starts_with(frame.alias, ["name"])
    starts_with(frame.join, ["other", "on", ("how", "inner")])
    starts_with(frame.union, ["other"])
    starts_with(frame.union_by_name, ["other", ("allow_missing_columns", False)])
    # API.md writes map_in_arrow(fn, schema): the parameter is PySpark's `func`; called positionally either way
    starts_with(frame.map_in_arrow, ["func", "schema"])
    starts_with(frame.map_in_pandas, ["func", "schema"])
    starts_with(frame.expect, ["name", "condition", ("on_violation", "warn"), ("quarantine", None)])
    # each transformation returns a new frame; nothing runs
    for f2 in (frame.select("k"), frame.filter("v > 0"), frame.with_column("w", "v + 1"), frame.alias("a"),
               frame.with_watermark("t", "10 minutes"), frame.drop_duplicates(), frame.union(frame)):
        assert isinstance(f2, StreamFrame) and f2 is not frame


def test_grouped_frames_and_functions(frame):
    g = frame.group_by(F.window("t", "10 minutes", slide="5 minutes"), "k")
    assert callable(g.count) and shape(g.count) == []
    takes_varargs(g.agg)
    starts_with(g.transform_with_state, ["processor", "output_schema", ("time_mode", None)])
    has_defaults(g.transform_with_state, initial_state=None)
    # F.window(col, duration, slide=None) and F.session_window(col, gap), called positionally as documented
    assert [p if isinstance(p, str) else p[0] for p in shape(F.window)][1:3] == ["duration", "slide"]
    has_defaults(F.window, slide=None)
    w = F.window("t", "10 minutes", "5 minutes")
    assert (w.size_ms, w.slide_ms) == (600_000, 300_000)
    assert F.window("t", "1 hour").slide_ms == 3_600_000 and F.session_window("t", "5 minutes").gap_ms == 300_000
    starts_with(F.window_time, [("window_column", "window")])
    assert F.count().output_name == "count" and F.sum("x").alias("total").output_name == "total"
    for agg in (F.min, F.max, F.avg, F.first, F.last):
        assert agg("x").column == "x"
    for fn in (F.window_time, F.explode, F.explode_outer, F.posexplode, F.udf, F.pandas_udf):
        assert callable(fn), fn
    assert callable(F.udf(lambda x: x, "BIGINT"))


def test_writer_surface(frame):
    w = frame.write_stream
    for name, documented in (("format", ["fmt"]), ("output_mode", ["mode"]), ("option", ["key", "value"]),
                             ("checkpoint_location", ["path"]), ("query_name", ["name"]),
                             ("foreach_batch", ["fn"]), ("start", [("path", None)])):
        starts_with(getattr(w, name), documented)
        assert len(shape(getattr(w, name))) == len(documented), name
    starts_with(w.trigger, [("processing_time", None), ("available_now", False), ("once", False)])
    starts_with(w.apply_changes, ["keys", "sequence_by", ("apply_as_deletes", None), ("except_columns", None),
                                  ("stored_as_scd_type", 1)])
    # each call returns the writer to chain on
    w2 = w.format("memory").output_mode("append").option("state_store", "memory").query_name("x")
    assert type(w2) is type(w)


PROGRESS_KEYS = {"id", "run_id", "name", "batch_id", "timestamp", "num_input_rows", "input_rows_per_second",
                 "processed_rows_per_second", "duration_ms", "event_time", "state_operators", "sources", "sink"}


def test_query_surface_and_progress(tmp_path):
    f = inc.read_stream.memory("k STRING, v BIGINT")
    q = (f.group_by("k").count().write_stream.format("memory").output_mode("update").option("state_store", "memory")
         .checkpoint_location(str(tmp_path / "chk")).query_name("api_contract").trigger(processing_time="1 second")
         .start())
    try:
        assert type(q).__name__ == "StreamingQuery"
        assert isinstance(q.id, str) and isinstance(q.run_id, str) and q.name == "api_contract"
        assert q.is_active is True and isinstance(q.recent_progress, list)
        starts_with(q.await_termination, [("timeout", None)])
        for name in ("process_all_available", "stop", "exception"):
            assert callable(getattr(q, name)), name
        f.add_data([("a", 1)])
        q.process_all_available()
        assert q.exception() is None
        p = q.last_progress
        assert PROGRESS_KEYS <= set(p), PROGRESS_KEYS - set(p)
        assert p["batch_id"] == 0 and p["num_input_rows"] == 1 and p["id"] == q.id and p["run_id"] == q.run_id
        assert {"trigger_execution", "latest_offset", "get_batch", "add_batch", "wal_commit",
                "commit_offsets"} <= set(p["duration_ms"])
        assert {"operator_name", "num_rows_total", "num_rows_updated", "num_rows_removed",
                "num_rows_dropped_by_watermark", "memory_used_bytes"} <= set(p["state_operators"][0])
        assert {"description", "start_offset", "end_offset", "latest_offset", "num_input_rows"} <= set(p["sources"][0])
        assert {"description", "num_output_rows"} <= set(p["sink"])
        assert q.recent_progress[-1] == p
    finally:
        q.stop()
    assert q.await_termination(timeout=5) is True and q.is_active is False

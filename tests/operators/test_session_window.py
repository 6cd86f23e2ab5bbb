"""Session windows (gap 5 min, watermark 10 min), batch for batch as SEMANTICS.md says: rows are
sessions [t, t+gap) merged per key (touching ones merge), a bridging row merges stored sessions,
rows with t + gap <= WL_b are late (counted per partial group (key, t)), sessions with
end <= W_b are emitted in append mode and removed. Expected values are derived from those rules; they
were not recorded on Spark (no recorder in docs/spark/; recorded session-window cases:
tests/operators/chain_spark_expected.py, session_then_window)."""
from __future__ import annotations

import pytest

import increments as inc
from increments import functions as F
from agg_testutil import STORES, metrics, row as r, run, watermarks


def sessions(df):
    return df.with_watermark("ts", "10 minutes").group_by(F.session_window("ts", "5 minutes"), "id").count()


S1 = [[r("a", "10:00"), r("a", "10:02")],
      [r("a", "10:30"), r("b", "10:31")],
      [r("a", "10:03"), r("a", "10:03"), r("a", "10:01"), r("b", "10:45")],
      [r("a", "10:50")]]


@pytest.mark.parametrize("store", STORES)
def test_session_append(tmp_path, store):
    out, prog, chk = run(tmp_path, S1, sessions, "append", store)
    assert out == {0: [], 1: [],
                   # WL = 09:52: the three a rows extend [10:00, 10:07) to [10:00, 10:08); W = 10:21 closes it
                   2: [(("10:00", "10:08"), "a", 5)],
                   3: [(("10:30", "10:35"), "a", 1)],          # end exactly at W = 10:35
                   4: [(("10:31", "10:36"), "b", 1)]}          # trailing no-data batch
    assert watermarks(prog) == ["epoch", "09:52", "10:21", "10:35", "10:40"]
    # every session of a touched key is upserted (a has two sessions in batch 1)
    assert metrics(prog) == [(1, 1, 0, 0), (3, 3, 0, 0), (3, 4, 1, 0), (3, 2, 1, 0), (2, 0, 1, 0)]
    assert prog[0]["state_operators"][0]["operator_name"] == "sessionWindowStateStoreSaveExec"
    state = inc.read_state(chk, operator="0")
    assert sorted(state.column("id").to_pylist()) == ["a", "b"]


S2 = [[r("a", "10:30"), r("b", "10:30")],
      [r("a", "10:40")],
      # WL = 10:20: a@10:10 (x2) and a@10:11 are late (2 partial groups); a@10:26 bridges
      # [10:30,10:35) and [10:40,10:45) through 10:33 and 10:36
      [r("a", "10:10"), r("a", "10:10"), r("a", "10:11"), r("a", "10:26"), r("a", "10:33"), r("a", "10:36")],
      [r("a", "10:45"), r("a", "10:28"), r("b", "10:50")]]


@pytest.mark.parametrize("store", STORES)
def test_session_late_rows_and_bridging(tmp_path, store):
    out, prog, _ = run(tmp_path, S2, sessions, "append", store)
    assert out == {0: [], 1: [], 2: [], 3: [], 4: [(("10:30", "10:35"), "b", 1)]}
    assert watermarks(prog) == ["epoch", "10:20", "10:30", "10:30", "10:40"]
    assert metrics(prog) == [(2, 2, 0, 0), (3, 2, 0, 0), (2, 1, 2, 2), (3, 3, 0, 0), (2, 0, 1, 0)]


@pytest.mark.parametrize("store", STORES)
def test_session_row_joins_a_session_closing_in_the_same_batch(tmp_path, store):
    # W_2 = 10:10, WL_2 = 09:50: a@10:04:59 extends [10:00,10:05) to [10:00,10:09:59), which closes at once
    batches = [[r("a", "10:00")], [r("a", "10:20")], [r("a", "10:04:59"), r("a", "10:12")]]
    out, prog, _ = run(tmp_path, batches, sessions, "append", store)
    assert out[2] == [(("10:00", "10:09:59"), "a", 2)]


@pytest.mark.parametrize("store", STORES)
def test_session_overlapping_an_evicted_session(tmp_path, store):
    # batch 2 (W = 10:05) emits and evicts a [10:00,10:05); in batch 3 a@10:02 is not late
    # (10:07 > WL = 10:05) and starts a second, overlapping session for a
    batches = [[r("a", "10:00")], [r("a", "10:15")], [r("b", "10:16")], [r("a", "10:02")], [r("c", "10:30")]]
    out, prog, _ = run(tmp_path, batches, sessions, "append", store)
    assert out[2] == [(("10:00", "10:05"), "a", 1)]
    assert out[3] == [] and out[4] == []
    assert out[5] == [(("10:02", "10:07"), "a", 1), (("10:15", "10:20"), "a", 1)]
    assert watermarks(prog) == ["epoch", "09:50", "10:05", "10:06", "10:06", "10:20"]
    assert [m[3] for m in metrics(prog)] == [0] * 6


@pytest.mark.parametrize("store", STORES)
def test_session_complete(tmp_path, store):
    out, prog, _ = run(tmp_path, S1, sessions, "complete", store)
    assert len(prog) == 4
    assert out[3] == [(("10:00", "10:08"), "a", 5), (("10:30", "10:35"), "a", 1), (("10:31", "10:36"), "b", 1),
                      (("10:45", "10:50"), "b", 1), (("10:50", "10:55"), "a", 1)]


def test_session_update_mode_is_refused(tmp_path):
    df = inc.read_stream.memory("id STRING, ts TIMESTAMP, v BIGINT")
    with pytest.raises(inc.AnalysisException, match="update output mode"):
        sessions(df).write_stream.format("memory").query_name("s_upd").output_mode("update").start()


@pytest.mark.parametrize("keys, mode, message", [
    (lambda: (F.session_window("ts", "5 minutes"), "id"), "update", "update output mode is not supported for session"),
    (lambda: (F.session_window("ts", "5 minutes"), F.window("ts", "5 minutes")), "complete",
     "one F.session_window\\(...\\) and plain columns only"),
    (lambda: (F.window("ts", "5 minutes"), F.window("ts", "10 minutes")), "complete", "at most one F.window"),
])
def test_grouping_refusals_without_starting(keys, mode, message):
    """The plan-only grouping refusals hold when a query starts and when it is only compiled
    without validation (plan/validate.py check_node, called by the aggregation's builder)."""
    from increments.plan.compiler import Compiler
    frame = inc.read_stream.memory("id STRING, ts TIMESTAMP, v BIGINT").group_by(*keys()).count()
    with pytest.raises(inc.AnalysisException, match=message):
        frame.write_stream.format("memory").query_name("s_refused").output_mode(mode).start()
    with pytest.raises(inc.AnalysisException, match=message):
        Compiler(mode, check=False).compile(frame.node)


def test_session_append_needs_watermark(tmp_path):
    df = inc.read_stream.memory("id STRING, ts TIMESTAMP, v BIGINT")
    with pytest.raises(inc.AnalysisException, match="with_watermark"):
        df.group_by(F.session_window("ts", "5 minutes")).count().write_stream.format("memory") \
            .query_name("s_nowm").output_mode("append").start()

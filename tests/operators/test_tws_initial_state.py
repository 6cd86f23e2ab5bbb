"""transform_with_state(..., initial_state=...) as Spark 4's transformWithState with initialState.

Recorded on Apache Spark 4.3.0 (docs/spark/record_tws_initial_state.py: local[2], RocksDB state
store, one file per batch, availableNow, foreachBatch; the same processor and inputs as here):
in the first batch only, handleInitialState(key, row, timerValues) runs once per initial-state row
(key c has two rows; key z has no input until batch 2), before the key's input rows; it emits
nothing. Per batch output and the operator's (numRowsTotal, numRowsUpdated):
"""
from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest

import increments as inc
from increments.errors import AnalysisException
from jsonl_testutil import write_files

FILES = [["a", "b"], ["a", "c"], ["z"]]
INIT = [("a", 10), ("c", 100), ("c", 5), ("z", 7)]
SPARK_BATCHES = {0: [("a", 11), ("b", 1)], 1: [("a", 12), ("c", 106)], 2: [("z", 8)]}
SPARK_STATE = [(4, 6), (4, 2), (4, 1)]


class Count(inc.StatefulProcessor):
    def init(self, handle):
        self.count = handle.get_value_state("count", "n BIGINT")

    def handle_initial_state(self, key, initial_state, timer_values):
        cur = (self.count.get() or (0,))[0]
        self.count.update((cur + initial_state["n"],))

    def handle_input_rows(self, key, rows, timer_values):
        n = (self.count.get() or (0,))[0] + sum(1 for _ in rows)
        self.count.update((n,))
        yield {"k": key[0], "n": n}


def _run(tmp_path, files, initial_state, store="rocksdb", processor=None, chk="chk"):
    src = write_files(str(tmp_path / "in"), [[{"k": k} for k in f] for f in files])
    frame = (inc.read_stream.files(src, "json", "k STRING", max_files_per_trigger=1).group_by("k")
             .transform_with_state(processor or Count(), "k STRING, n BIGINT", initial_state=initial_state))
    name = "twsi_" + uuid.uuid4().hex[:8]
    q = (frame.write_stream.format("memory").query_name(name).trigger(available_now=True)
         .checkpoint_location(str(tmp_path / chk)).option("state_store", store).start())
    q.await_termination()
    batches = {b: sorted(tuple(r.values()) for r in t.to_pylist()) for b, t in inc.memory_batches(name).items()}
    state = [(p["state_operators"][0]["num_rows_total"], p["state_operators"][0]["num_rows_updated"])
             for p in q.recent_progress]
    return batches, state


def _init_table():
    return pa.table({"k": [k for k, _ in INIT], "n": [n for _, n in INIT]})


@pytest.mark.parametrize("store", ["rocksdb", "memory"])
def test_same_as_spark(tmp_path, store):
    batches, state = _run(tmp_path, FILES, _init_table(), store)
    assert batches == SPARK_BATCHES
    assert state == SPARK_STATE


def test_initial_state_from_files(tmp_path):
    path = tmp_path / "init.json"
    path.write_text("".join(json.dumps({"n": n, "k": k}) + "\n" for k, n in INIT))
    batches, _ = _run(tmp_path, FILES, inc.read.files(str(path), "json", "k STRING, n BIGINT"))
    assert batches == SPARK_BATCHES


def test_applied_in_the_first_batch_only_not_on_restart(tmp_path):
    batches, _ = _run(tmp_path, FILES[:1], _init_table())
    assert batches == {0: SPARK_BATCHES[0]}
    # the same checkpoint, started again with more files: batch 1 continues from state, no re-apply
    batches, _ = _run(tmp_path, FILES, _init_table())
    assert batches == {1: SPARK_BATCHES[1], 2: SPARK_BATCHES[2]}


def test_key_columns_must_be_there(tmp_path):
    with pytest.raises(AnalysisException, match="initial_state has no key columns"):
        _run(tmp_path, FILES, pa.table({"user": ["a"], "n": [1]}))


def test_a_processor_without_handle_initial_state_ignores_it(tmp_path):
    class Plain(Count):
        handle_initial_state = inc.StatefulProcessor.handle_initial_state
    batches, _ = _run(tmp_path, FILES, _init_table(), processor=Plain())
    assert batches == {0: [("a", 1), ("b", 1)], 1: [("a", 2), ("c", 1)], 2: [("z", 1)]}

"""A changed aggregate whose state schema stays the same is refused at the start and called unsafe
by `increments check` (issue 28 item 4): F.min("amount").alias("m") -> F.max(...), F.count() ->
F.sum("amount").alias("count"). The checkpoint's conf records each stateful operator's functions
and inputs (`state_functions[<id>:<name>]`). A checkpoint written before that key existed is not
refused: its first start records the functions, and a later change is refused."""
from __future__ import annotations

import copy
import json
import os

import pytest

import increments as inc
from increments import functions as F
from increments.lifecycle.check import check, compare

SCHEMA = "k STRING, amount BIGINT, ts TIMESTAMP"


def _input(d):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "part-0000.json"), "w") as f:
        for i in range(6):
            f.write(json.dumps({"k": f"k{i % 2}", "amount": i + 1, "ts": f"2024-01-01T10:0{i}:00Z"}) + "\n")


def _writer(tmp_path, *aggs):
    frame = (inc.read_stream.files(str(tmp_path / "in"), "json", SCHEMA).with_watermark("ts", "5 minutes")
             .group_by(F.window("ts", "10 minutes"), "k").agg(*aggs))
    return (frame.write_stream.format("memory").query_name("aggq").output_mode("update").trigger(available_now=True)
            .checkpoint_location(str(tmp_path / "chk")).option("state_store", "memory"))


def _run(tmp_path, *aggs):
    q = _writer(tmp_path, *aggs).start()
    q.await_termination()


def _conf(tmp_path) -> dict:
    with open(tmp_path / "chk" / "conf.json") as f:
        return json.load(f)


@pytest.mark.parametrize("first,changed,what", [
    ((F.min("amount").alias("m"),), (F.max("amount").alias("m"),), "min(amount) AS m -> max(amount) AS m"),
    ((F.count(),), (F.sum("amount").alias("count"),), "count(*) AS count -> sum(amount) AS count"),
])
def test_changed_function_same_schema_refused_and_unsafe(tmp_path, first, changed, what):
    _input(str(tmp_path / "in"))
    _run(tmp_path, *first)
    conf = _conf(tmp_path)
    assert conf["state_functions[0:stateStoreSave]"] == [first[0].func + f"({first[0].column or '*'}) AS "
                                                         f"{first[0].output_name}"]
    report = check(_writer(tmp_path, *changed))
    assert not report.safe and what in report.text() and "even when their schema stays the same" in report.text()
    with pytest.raises(inc.IncompatibleCheckpointError, match=r"state_functions\[0:stateStoreSave\]"):
        _run(tmp_path, *changed)
    assert check(_writer(tmp_path, *first)).safe
    _run(tmp_path, *first)    # the original query still starts


def test_checkpoint_from_before_the_functions_were_recorded(tmp_path):
    """Not refused (nothing to compare with): the start records the functions; a later change is refused."""
    _input(str(tmp_path / "in"))
    _run(tmp_path, F.min("amount").alias("m"))
    conf = _conf(tmp_path)
    del conf["state_functions[0:stateStoreSave]"]       # as a checkpoint written before this release
    with open(tmp_path / "chk" / "conf.json", "w") as f:
        json.dump(conf, f)
    report = check(_writer(tmp_path, F.min("amount").alias("m")))
    assert report.safe and "predates recording the aggregate functions" in report.text()
    _run(tmp_path, F.min("amount").alias("m"))
    assert _conf(tmp_path)["state_functions[0:stateStoreSave]"] == ["min(amount) AS m"]
    with pytest.raises(inc.IncompatibleCheckpointError):
        _run(tmp_path, F.max("amount").alias("m"))


def test_rules_on_stored_confs():
    old = {"state_store": "memory", "state_partitions": 2,
           "state_schema[0:stateStoreSave]": {"key": [["k", "VARCHAR"]], "value": [["m", "BIGINT"]]},
           "state_functions[0:stateStoreSave]": ["min(amount) AS m", "count(*) AS n"],
           "state_schema[1:symmetricHashJoin]": {"how": "inner"},
           "state_functions[1:symmetricHashJoin]": ["condition: a.k = b.k AND b.t <= a.t + INTERVAL 1 HOUR"],
           "state_schema[2:applyChanges]": {"scd_type": 2},
           "state_functions[2:applyChanges]": ["sequence_by: seq"],
           "plan": {"sources": ["S"], "stateful_operators": ["0:stateStoreSave"], "sink": "MemorySink"}}
    new = copy.deepcopy(old)
    new["state_functions[0:stateStoreSave]"][1] = "count(k) AS n"
    new["state_functions[1:symmetricHashJoin]"] = ["condition: a.k = b.k AND b.t <= a.t + INTERVAL 2 HOUR"]
    new["state_functions[2:applyChanges]"] = ["sequence_by: ts"]
    msgs = [f.what for f in compare(old, new) if not f.safe]
    assert msgs == ["operator 0:stateStoreSave: aggregate changed: count(*) AS n -> count(k) AS n",
                    "operator 1:symmetricHashJoin: join condition changed: "
                    "['condition: a.k = b.k AND b.t <= a.t + INTERVAL 1 HOUR'] -> "
                    "['condition: a.k = b.k AND b.t <= a.t + INTERVAL 2 HOUR']",
                    "operator 2:applyChanges: sequencing changed: ['sequence_by: seq'] -> ['sequence_by: ts']"]
    assert all(f.safe for f in compare(old, copy.deepcopy(old)))

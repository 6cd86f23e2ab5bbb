"""The rules of increments check on confs as the checkpoint stores them (join type, operators added
or removed, state store, source changed, sink changed); the CLI tests cover real checkpoints."""
from __future__ import annotations

import copy

from increments.lifecycle.check import compare

JOIN = {"state_store": "rocksdb", "state_partitions": 4, "watermark_columns": ["c_time", "i_time"],
        "state_schema[0:symmetricHashJoin]": {"how": "inner", "layout": 2, "left_keys": ["ad_id"],
                                              "right_keys": ["ad_id"], "left": [["ad_id", "string"]],
                                              "right": [["ad_id", "string"]]},
        "plan": {"sources": ["FileSource[a]", "FileSource[b]"], "stateful_operators": ["0:symmetricHashJoin"],
                 "sink": "DeltaSink[/lake/x]"}}


def _unsafe(old, new) -> list[str]:
    return [f.what + " | " + f.rule for f in compare(old, new) if not f.safe]


def test_same_conf_is_safe():
    fs = compare(JOIN, copy.deepcopy(JOIN))
    assert len(fs) == 1 and fs[0].safe


def test_join_type_change():
    new = copy.deepcopy(JOIN)
    new["state_schema[0:symmetricHashJoin]"]["how"] = "left_outer"
    [msg] = _unsafe(JOIN, new)
    assert "join type changed: 'inner' -> 'left_outer'" in msg and "stream-stream join are not allowed" in msg


def test_operator_added_source_and_sink_changed_store():
    new = copy.deepcopy(JOIN)
    new["state_schema[1:dedupe]"] = {"key": [["ad_id", "VARCHAR"]]}
    new["plan"]["sources"][1] = "FileSource[c]"
    new["plan"]["sink"] = "DeltaSink[/lake/y]"
    new["state_store"] = "memory"
    msgs = "\n".join(_unsafe(JOIN, new))
    assert "stateful operator 1:dedupe added" in msgs
    assert "source 1 changed: FileSource[b] -> FileSource[c]" in msgs
    assert "sink changed: DeltaSink[/lake/x] -> DeltaSink[/lake/y]" in msgs
    assert "state store provider changed: 'rocksdb' -> 'memory'" in msgs


def test_watermark_columns_unknown_to_an_older_checkpoint_are_not_a_change():
    old = {k: v for k, v in JOIN.items() if k != "watermark_columns"}
    assert _unsafe(old, copy.deepcopy(JOIN)) == []

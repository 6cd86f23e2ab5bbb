"""The engine's lineage record per source (increments/execution/lineage.py), without Dagster: a
query run locally reports in each progress entry the files it read, the Delta versions and the
upstream query's batches; Kafka offsets become topic/partition ranges."""
from __future__ import annotations

import json
import os

import increments as inc
from increments.execution import lineage


class _Kafka:          # the lineage of a Kafka read is its offsets: no broker needed
    def has_new_data(self, s, e):
        return s != e


_Kafka.__name__ = "KafkaSource"


def test_kafka_ranges_are_the_partitions_that_moved():
    rec = lineage.source_lineage(_Kafka(), {"t": {"0": 5, "1": 7}}, {"t": {"0": 9, "1": 7}, "u": {"0": 3}})
    assert rec == {"kind": "kafka", "ranges": [{"topic": "t", "partition": 0, "start": 5, "end": 9},
                                               {"topic": "u", "partition": 0, "start": None, "end": 3}]}
    assert lineage.describe(rec) == "kafka t/0 [5, 9), u/0 [None, 3)"
    assert lineage.versions_text([3, 4, 5, 9]) == "v3-5, v9"


def test_a_local_chain_names_files_versions_and_upstream_batches(tmp_path):
    d = str(tmp_path)
    land = os.path.join(d, "land")
    os.makedirs(land)
    for f in range(3):
        with open(os.path.join(land, f"f{f}.json"), "w") as out:
            out.write(json.dumps({"id": f, "name": "x"}) + "\n")
    bronze = (inc.read_stream.files(land, format="json", schema="id BIGINT, name STRING", max_files_per_trigger=2)
              .write_stream.format("delta").checkpoint_location(os.path.join(d, "chk1")).query_name("bronze")
              .trigger(available_now=True).start(os.path.join(d, "bronze")))
    bronze.await_termination()
    assert [p["sources"][0]["lineage"]["files"] for p in bronze.recent_progress] == [["f0.json", "f1.json"], ["f2.json"]]
    silver = (inc.read_stream.delta(os.path.join(d, "bronze")).write_stream.format("parquet")
              .checkpoint_location(os.path.join(d, "chk2")).query_name("silver")
              .trigger(available_now=True).start(os.path.join(d, "silver")))
    silver.await_termination()
    (p,) = silver.recent_progress
    lin = p["sources"][0]["lineage"]
    assert lin["versions"] == [0, 1]
    assert [(u["query"], u["batch_ids"]) for u in lin["upstream"]] == [("bronze", [0, 1])]
    gold = (inc.read_stream.files(os.path.join(d, "silver", "*", "*.parquet"), format="parquet")
            .write_stream.format("memory").query_name("gold").checkpoint_location(os.path.join(d, "chk3"))
            .trigger(available_now=True).start())
    gold.await_termination()
    (g,) = gold.recent_progress
    assert [(u["query"], u["batch_ids"]) for u in g["sources"][0]["lineage"]["upstream"]] == [("silver", [0])]

"""max_offsets_per_trigger="auto" on a real broker (Tansu): 1000 offsets first, then up to 8x per
quick batch, sizes recorded in offsets[N]; every message once."""
from __future__ import annotations

import json
import os

import pytest

import increments as inc
from broker import create_topic, produce
from increments.checkpoint.log import open_log

pytestmark = pytest.mark.kafka


def test_kafka_auto_sizes(kafka_broker, tmp_path):
    topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(12_000)], partition=0)
    rows = []
    chk = str(tmp_path / "chk")
    q = (inc.read_stream.kafka(kafka_broker, topic=topic, max_offsets_per_trigger="auto").parse_json("id BIGINT")
         .write_stream.foreach_batch(lambda t, b: rows.append(t.column("id").to_pylist())).checkpoint_location(chk)
         .option("target_batch_duration", "1 minute").trigger(available_now=True).start())
    q.await_termination()
    log = open_log(None, chk, json.load(open(os.path.join(chk, "metadata.json")))["id"])
    sizes = [log.get_offsets(n).conf["batch_size"]["0"] for n in range(len(rows))]
    assert sizes == [1000, 8000, 64000]
    assert [len(r) for r in rows] == [1000, 8000, 3000]
    assert sorted(i for r in rows for i in r) == list(range(12_000))

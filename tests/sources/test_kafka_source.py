"""read_stream.kafka on a real broker (Tansu): offsets, rate limit, replay, data loss, parse_json."""
from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

import increments as inc
from broker import create_topic, delete_topic, produce

pytestmark = pytest.mark.kafka


def _collect():
    got = {}

    def fn(table, batch_id):
        got[batch_id] = table
    return got, fn


def _run(frame, chk, fn, **opts):
    w = frame.write_stream.foreach_batch(fn).checkpoint_location(str(chk)).trigger(available_now=True)
    for k, v in opts.items():
        w = w.option(k, v)
    q = w.start()
    q.await_termination()
    return q


def _ids(got):
    return sorted(i for t in got.values() for i in t.column("id").to_pylist())


def test_columns_and_every_message_once_across_restarts(kafka_broker, tmp_path):
    topic = create_topic(kafka_broker, partitions=3)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(300)], keys=[b"k%d" % i for i in range(300)])
    got, fn = _collect()
    src = inc.read_stream.kafka(kafka_broker, topic=topic)
    assert src.schema.names == ["key", "value", "topic", "partition", "offset", "timestamp"]
    q = _run(src, tmp_path / "chk", fn)
    t = got[0]
    assert t.num_rows == 300 and set(t.column("topic").to_pylist()) == {topic}
    assert str(t.schema.field("partition").type) == "int32" and str(t.schema.field("timestamp").type) == "timestamp[us, tz=UTC]"
    per_part = {}
    for p, o in zip(t.column("partition").to_pylist(), t.column("offset").to_pylist()):
        per_part.setdefault(p, []).append(o)
    assert all(offs == list(range(len(offs))) for offs in per_part.values())
    assert sorted(json.loads(v)["id"] for v in t.column("value").to_pylist()) == list(range(300))
    end = q.last_progress["sources"][0]["end_offset"]
    assert sum(end[topic].values()) == 300 and set(end[topic]) <= {"0", "1", "2"}
    # new messages: the restarted query reads only those
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(300, 310)])
    got2, fn2 = _collect()
    _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT"), tmp_path / "chk", fn2)
    assert list(got2) == [1] and _ids(got2) == list(range(300, 310))


def test_max_offsets_per_trigger_splits_by_backlog(kafka_broker, tmp_path):
    topic = create_topic(kafka_broker, partitions=2)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(90)], partition=0)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(90, 120)], partition=1)
    got, fn = _collect()
    q = _run(inc.read_stream.kafka(kafka_broker, topic=topic, max_offsets_per_trigger=40).parse_json("id BIGINT"),
             tmp_path / "chk", fn)
    first = q.recent_progress[0]["sources"][0]
    assert first["end_offset"] == {topic: {"0": 30, "1": 10}}       # 40 * 90/120 and 40 * 30/120
    assert all(t.num_rows <= 40 for t in got.values())
    assert _ids(got) == list(range(120))


def test_starting_offsets_latest_and_explicit(kafka_broker, tmp_path):
    topic = create_topic(kafka_broker, partitions=2)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(10)], partition=0)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(10, 20)], partition=1)
    got, fn = _collect()
    _run(inc.read_stream.kafka(kafka_broker, topic=topic, starting_offsets={topic: {"0": 7, "1": -2}})
         .parse_json("id BIGINT"), tmp_path / "chk1", fn)
    assert _ids(got) == [7, 8, 9] + list(range(10, 20))
    got, fn = _collect()
    late = inc.read_stream.kafka(kafka_broker, topic=topic, starting_offsets="latest").parse_json("id BIGINT")
    _run(late, tmp_path / "chk2", fn)
    assert got == {}
    produce(kafka_broker, topic, [json.dumps({"id": 100})], partition=1)
    _run(late, tmp_path / "chk2", fn)
    assert _ids(got) == [100]


def test_two_topics(kafka_broker, tmp_path):
    a, b = create_topic(kafka_broker), create_topic(kafka_broker)
    produce(kafka_broker, a, [json.dumps({"id": 1})])
    produce(kafka_broker, b, [json.dumps({"id": 2}), json.dumps({"id": 3})])
    got, fn = _collect()
    _run(inc.read_stream.kafka(kafka_broker, topics=[a, b]).parse_json("id BIGINT", keep=["topic"]),
         tmp_path / "chk", fn)
    assert _ids(got) == [1, 2, 3]


def test_invalid_json_fails_naming_topic_partition_offset(kafka_broker, tmp_path):
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [json.dumps({"id": 1}), "{not json", json.dumps({"id": 3})])
    got, fn = _collect()
    with pytest.raises(inc.StreamingQueryException, match=rf"topic {topic}, partition 0, offset 1"):
        _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT"), tmp_path / "chk", fn)
    assert got == {}


def test_invalid_json_goes_to_dead_letter_table_once(kafka_broker, tmp_path):
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [json.dumps({"id": 1}), "{not json", json.dumps({"id": "x"}), b"\xff\xfe",
                                  json.dumps({"id": 4})])
    got, fn = _collect()
    dlq = str(tmp_path / "dlq")
    q = _run(inc.read_stream.kafka(kafka_broker, topic=topic)
             .parse_json("id BIGINT", dead_letter=inc.dead_letter.delta(dlq)), tmp_path / "chk", fn)
    assert _ids(got) == [1, 4]
    bad = DeltaTable(dlq).to_pyarrow_table().sort_by("offset")
    assert bad.column("offset").to_pylist() == [1, 2, 3]
    assert bad.column("topic").to_pylist() == [topic] * 3 and bad.column("batch_id").to_pylist() == [0, 0, 0]
    assert bad.column("value").to_pylist()[0] == b"{not json"
    assert all(r for r in bad.column("reason").to_pylist())
    assert q.last_progress["dead_letters"] == {inc.dead_letter.delta(dlq).description: 3}


def test_data_loss_when_topic_recreated(kafka_broker, tmp_path):
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(5)])
    got, fn = _collect()
    frame = inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT")
    _run(frame, tmp_path / "chk", fn)
    delete_topic(kafka_broker, topic)
    create_topic(kafka_broker, topic)
    produce(kafka_broker, topic, [json.dumps({"id": 10})])
    with pytest.raises(inc.StreamingQueryException) as ei:
        _run(frame, tmp_path / "chk", fn)
    msg = str(ei.value)
    assert f"topic {topic!r}, partition 0: offsets [1, 5)" in msg and "fail_on_data_loss=False" in msg
    # skipping: the lost range is counted, the query goes on from the new end
    skip = inc.read_stream.kafka(kafka_broker, topic=topic, fail_on_data_loss=False).parse_json("id BIGINT")
    got, fn = _collect()
    _run(skip, tmp_path / "chk", fn)
    produce(kafka_broker, topic, [json.dumps({"id": 11})])
    _run(skip, tmp_path / "chk", fn)
    assert _ids(got) == [11]


def test_backlog_reports_the_offsets_beyond_an_end(kafka_broker):
    """The lag the Dagster sensor and the kafka_lag check read: side-effect free."""
    from increments.sources.kafka import KafkaSource
    topic = create_topic(kafka_broker, partitions=2)
    produce(kafka_broker, topic, ["{}"] * 6, partition=0)
    produce(kafka_broker, topic, ["{}"] * 4, partition=1)
    src = KafkaSource(kafka_broker, topic=topic)
    assert src.backlog({topic: {"0": 0, "1": 0}})["offsets_pending"] == 10
    assert src.backlog({topic: {"0": 6, "1": 1}}) == {"offsets_pending": 3,
                                                      "per_partition": {f"{topic}/0": 0, f"{topic}/1": 3}}
    src.close()

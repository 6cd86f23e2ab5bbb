"""format("kafka"): Spark's columns, exactly once through Kafka transactions (noida-db's Kafka),
the refusal of a broker without transactions (Tansu) and the at-least-once opt-in.

The crash matrix (SIGKILL after every protocol step and inside the producer's commit) is in
tests/faults/test_kafka_sink_crash.py."""
from __future__ import annotations

import pytest

import increments as inc
from broker import create_topic
from increments.errors import AnalysisException, StreamingQueryException
from kafka_testutil import java_murmur2_partition, read_committed

pytestmark = pytest.mark.kafka


def _writer(frame, bootstrap, chk, topic=None, **options):
    w = (frame.write_stream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
         .checkpoint_location(str(chk)).trigger(available_now=True))
    if topic is not None:
        w = w.option("topic", topic)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def _run(w):
    q = w.start()
    q.await_termination()
    return q


def test_rows_with_key_value_headers_partition_arrive_once_per_batch(kafka_txn_broker, tmp_path):
    topic = create_topic(kafka_txn_broker, partitions=3)
    src = inc.read_stream.memory("k STRING, v STRING, p INTEGER")
    frame = src.select("k AS key", "encode(v) AS value", "p AS partition",
                       "[{'key': 'origin', 'value': encode('test')}] AS headers", "'ignored' AS other")
    src.add_data([{"k": f"k{i}", "v": f"v{i}", "p": i % 3} for i in range(6)])
    q = _run(_writer(frame, kafka_txn_broker, tmp_path / "chk", topic))
    assert q.last_progress["sink"]["num_output_rows"] == 6
    got = read_committed(kafka_txn_broker, topic, 3)
    assert got == sorted([(i % 3, f"k{i}".encode(), f"v{i}".encode(), (("origin", b"test"),)) for i in range(6)],
                         key=repr)
    src.add_data([{"k": "k9", "v": "v9", "p": 1}])       # a second batch of the same query
    _run(_writer(frame, kafka_txn_broker, tmp_path / "chk", topic))
    assert len(read_committed(kafka_txn_broker, topic, 3)) == 7


def test_a_redone_batch_is_skipped_by_its_marker(kafka_txn_broker, tmp_path):
    """The sink of a fresh process (a restart) finds batch N in Kafka and writes nothing."""
    import pyarrow as pa

    from increments.sinks.base import SinkContext
    from increments.sinks.kafka import KafkaSink
    topic = create_topic(kafka_txn_broker)
    opts = {"kafka.bootstrap.servers": kafka_txn_broker, "topic": topic}
    ctx = SinkContext("q-redo-1", "redo", "append", str(tmp_path / "chk"))
    batch = pa.table({"value": ["a", "b"]})
    first = KafkaSink(opts)
    first.open(ctx)
    assert first.add_batch(0, batch).num_output_rows == 2
    first.close()
    again = KafkaSink(opts)              # as the restarted process
    again.open(ctx)
    r = again.add_batch(0, batch)
    assert r.skipped_replay and r.num_output_rows == 0
    assert again.add_batch(1, pa.table({"value": ["c"]})).num_output_rows == 1
    assert again.holds_query("q-redo-1") and not again.holds_query("another-query")
    again.close()
    assert [v for _, _, v, _ in read_committed(kafka_txn_broker, topic)] == [b"a", b"b", b"c"]


def test_a_zombie_producer_is_fenced_and_writes_nothing(kafka_txn_broker, tmp_path):
    import pyarrow as pa

    from increments.sinks.base import SinkContext
    from increments.sinks.kafka import KafkaSink, KafkaSinkError
    topic = create_topic(kafka_txn_broker)
    opts = {"kafka.bootstrap.servers": kafka_txn_broker, "topic": topic}
    ctx = SinkContext("q-zombie-1", "zombie", "append", str(tmp_path / "chk"))
    old, new = KafkaSink(opts), KafkaSink(opts)
    old.open(ctx)
    old.add_batch(0, pa.table({"value": ["first"]}))
    new.open(ctx)
    assert new.add_batch(1, pa.table({"value": ["by the new run"]})).num_output_rows == 1   # fences `old`
    with pytest.raises(KafkaSinkError, match="fenced|took over"):
        old.add_batch(1, pa.table({"value": ["by the zombie"]}))
    old.close()
    new.close()
    assert [v for _, _, v, _ in read_committed(kafka_txn_broker, topic)] == [b"by the new run", b"first"]


def test_keys_go_to_the_partition_java_kafka_would_choose(kafka_txn_broker, tmp_path):
    topic = create_topic(kafka_txn_broker, partitions=5)
    src = inc.read_stream.memory("k STRING")
    src.add_data([{"k": f"user-{i}"} for i in range(40)])
    _run(_writer(src.select("k AS key", "k AS value"), kafka_txn_broker, tmp_path / "chk", topic))
    got = read_committed(kafka_txn_broker, topic, 5)
    assert len(got) == 40
    assert all(p == java_murmur2_partition(k, 5) for p, k, _, _ in got)


def test_a_topic_column_routes_rows_and_the_option_overrides_it(kafka_txn_broker, tmp_path):
    a, b = create_topic(kafka_txn_broker), create_topic(kafka_txn_broker)
    src = inc.read_stream.memory("t STRING, v STRING")
    src.add_data([{"t": a, "v": "to a"}, {"t": b, "v": "to b"}])
    _run(_writer(src.select("t AS topic", "v AS value"), kafka_txn_broker, tmp_path / "c1"))
    assert [v for _, _, v, _ in read_committed(kafka_txn_broker, a)] == [b"to a"]
    assert [v for _, _, v, _ in read_committed(kafka_txn_broker, b)] == [b"to b"]
    src2 = inc.read_stream.memory("t STRING, v STRING")
    src2.add_data([{"t": a, "v": "all to b"}])
    _run(_writer(src2.select("t AS topic", "v AS value"), kafka_txn_broker, tmp_path / "c2", b))
    assert [v for _, _, v, _ in read_committed(kafka_txn_broker, b)] == [b"all to b", b"to b"]


@pytest.mark.parametrize("select, match", [
    (["v AS key"], "Required attribute 'value' not found"),
    (["n AS value"], "value attribute type must be a string or binary"),
    (["v AS value", "n AS key"], "key attribute type must be a string or binary"),
    (["v AS value", "v AS partition"], "partition attribute type must be an int"),
    (["v AS value", "v AS headers"], "headers attribute type must be an array"),
])
def test_output_columns_that_do_not_fit_are_refused_before_any_batch(kafka_txn_broker, tmp_path, select, match):
    src = inc.read_stream.memory("v STRING, n BIGINT")
    with pytest.raises(AnalysisException, match=match):
        _writer(src.select(*select), kafka_txn_broker, tmp_path / "chk", "t").start()


def test_no_topic_option_and_no_topic_column_is_refused(kafka_txn_broker, tmp_path):
    src = inc.read_stream.memory("v STRING")
    with pytest.raises(AnalysisException, match="topic option required when no 'topic' attribute is present"):
        _writer(src.select("v AS value"), kafka_txn_broker, tmp_path / "chk").start()
    with pytest.raises(AnalysisException, match="kafka.bootstrap.servers' must be specified"):
        src.select("v AS value").write_stream.format("kafka").option("topic", "t").checkpoint_location(
            str(tmp_path / "c2")).start()


def test_a_null_topic_fails_the_batch_naming_the_row(kafka_txn_broker, tmp_path):
    src = inc.read_stream.memory("t STRING, v STRING")
    src.add_data([{"t": None, "v": "lost?"}])
    q = _writer(src.select("t AS topic", "v AS value"), kafka_txn_broker, tmp_path / "chk").start()
    with pytest.raises(StreamingQueryException, match=r"Null topic present in the data \(output row 0"):
        q.await_termination()


def test_a_broker_without_transactions_is_refused_at_start_unless_at_least_once(kafka_broker, tmp_path):
    """Tansu (tests/broker.py) shows aborted records to read_committed consumers: exactly once is
    refused before any batch, naming the opt-in; at_least_once writes each batch."""
    topic = create_topic(kafka_broker)
    src = inc.read_stream.memory("v STRING")
    src.add_data([{"v": "one"}, {"v": "two"}])
    with pytest.raises(AnalysisException, match=r"no usable transactions.*aborted transaction.*"
                                                r"delivery_guarantee', 'at_least_once'"):
        _writer(src.select("v AS value"), kafka_broker, tmp_path / "c1", topic).start()
    assert read_committed(kafka_broker, topic, settle_s=0.5) == []
    _run(_writer(src.select("v AS value"), kafka_broker, tmp_path / "c2", topic, delivery_guarantee="at_least_once"))
    assert sorted(v for _, _, v, _ in read_committed(kafka_broker, topic)) == [b"one", b"two"]


def test_options_the_sink_cannot_honour_are_refused(kafka_txn_broker):
    from increments.sinks.kafka import KafkaSink
    base = {"kafka.bootstrap.servers": kafka_txn_broker, "topic": "t"}
    for extra, match in [({"kafka.transactional.id": "x"}, "derived from the query id"),
                         ({"kafka.value.serializer": "x"}, "not supported"),
                         ({"delivery_guarantee": "maybe"}, "exactly_once"),
                         ({"kafka.enable.idempotence": "false"}, "cannot be exactly once")]:
        with pytest.raises(AnalysisException, match=match):
            KafkaSink({**base, **extra})

"""read_stream.kafka on a real broker (Tansu): offsets, rate limit, replay, data loss, parse_json."""
from __future__ import annotations

import json
import sys

import pyarrow as pa
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
    assert f"topic {topic!r}: id " in msg and "deleted and recreated" in msg and "fail_on_data_loss=False" in msg
    # fail_on_data_loss=False: the recreated topic is read from its new beginning
    skip = inc.read_stream.kafka(kafka_broker, topic=topic, fail_on_data_loss=False).parse_json("id BIGINT")
    got, fn = _collect()
    _run(skip, tmp_path / "chk", fn)
    produce(kafka_broker, topic, [json.dumps({"id": 11})])
    _run(skip, tmp_path / "chk", fn)
    assert _ids(got) == [10, 11]


def test_topic_recreated_with_more_messages_is_detected(kafka_broker, tmp_path):
    """The offsets do not move backwards (8 messages now, 5 read before): only the topic id tells."""
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(5)])
    got, fn = _collect()
    _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT"), tmp_path / "chk", fn)
    assert _ids(got) == list(range(5))
    delete_topic(kafka_broker, topic)
    create_topic(kafka_broker, topic)
    produce(kafka_broker, topic, [json.dumps({"id": 100 + i}) for i in range(8)])
    got, fn = _collect()
    with pytest.raises(inc.StreamingQueryException, match="deleted and recreated since the query read it"):
        _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT"), tmp_path / "chk", fn)
    assert got == {}
    q = _run(inc.read_stream.kafka(kafka_broker, topic=topic, fail_on_data_loss=False).parse_json("id BIGINT"),
             tmp_path / "chk", fn)
    assert _ids(got) == [100 + i for i in range(8)]          # every message of the new topic, once
    assert q.last_progress["sources"][0]["end_offset"] == {topic: {"0": 8}}
    # a restart goes on normally (and a redo would read the same rows)
    produce(kafka_broker, topic, [json.dumps({"id": 200})])
    _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT"), tmp_path / "chk", fn)
    assert _ids(got) == [100 + i for i in range(8)] + [200]


@pytest.mark.parametrize("value,match", [
    ('{"t": {"0": 1}', "not valid JSON"),
    ("earlist", "not 'earliest', 'latest' or JSON"),
    ({"t": {"0": "x"}}, "offset 'x' is not valid"),
    ({"other": {"0": 1}}, "topic 'other' is not subscribed"),
])
def test_bad_starting_offsets_name_the_option(value, match):
    with pytest.raises(ValueError, match=match) as ei:
        inc.read_stream.kafka("127.0.0.1:1", topic="t", starting_offsets=value)
    assert "starting_offsets=" in str(ei.value)


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


# -- parse_json right on the source: parsed piece by piece while reading (sources/kafka/) ----------

PJ_SCHEMA = "id BIGINT, name STRING, amount DOUBLE, ok BOOLEAN, at TIMESTAMP"


def _spy_take(monkeypatch):
    """Record, per take_parsed call, whether a complete pre-parse was handed over."""
    from increments.sources.kafka import KafkaSource
    taken, take = [], KafkaSource.take_parsed

    def spy(self, table, schema):
        out = take(self, table, schema)
        taken.append(out is not None and all(t is not None and t.num_rows == n for n, t in out))
        return out
    monkeypatch.setattr(KafkaSource, "take_parsed", spy)
    return taken


def _spy_consumed(monkeypatch):
    """Record the (partition, start, end) of every range consumed from the broker."""
    import increments.sources.kafka.consume as consume_mod
    consumed, take = [], consume_mod.KafkaConsume._consume_range

    def spy(self, t, p, s, e, *a, **kw):
        consumed.append((p, s, e))
        return take(self, t, p, s, e, *a, **kw)
    monkeypatch.setattr(consume_mod.KafkaConsume, "_consume_range", spy)
    return consumed


def test_parse_json_while_reading_gives_the_exact_paths_rows(kafka_broker, tmp_path, monkeypatch):
    import increments.sources.kafka as kafka_mod
    import increments.sources.kafka.consume as consume_mod
    from increments.operators.parse_json import ParseJsonOp
    topic = create_topic(kafka_broker, partitions=2)
    rows = [{"id": i, "name": f"n{i}" if i % 7 else None, "amount": i / 4, "ok": i % 2 == 0,
             "at": f"2024-01-01T00:00:{i % 60:02d}Z", "extra": [i]} for i in range(120)]
    produce(kafka_broker, topic, [json.dumps(r) for r in rows])
    monkeypatch.setattr(consume_mod, "_CHUNK", 7)          # many consume() calls per partition and batch
    monkeypatch.setattr(consume_mod, "_PARSE_BYTES", 1000)  # and pieces parsed while reading
    taken = _spy_take(monkeypatch)

    def run(name):
        got, fn = _collect()
        _run(inc.read_stream.kafka(kafka_broker, topic=topic, max_offsets_per_trigger=50)
             .parse_json(PJ_SCHEMA, keep=["partition", "offset"]), tmp_path / name, fn)
        return pa.concat_tables(got[b] for b in sorted(got))
    pieces, hand = [], kafka_mod.KafkaSource._hand_to_parse

    def spy_hand(self, piece):
        pieces.append(len(piece))
        return hand(self, piece)
    monkeypatch.setattr(kafka_mod.KafkaSource, "_hand_to_parse", spy_hand)
    fast = run("fast")
    assert taken and all(taken)                      # every batch used the parse done while reading
    assert len(pieces) >= 6 and sum(pieces) == 120   # several pieces per batch
    monkeypatch.setattr(ParseJsonOp, "_parsed_while_reading", lambda self, *a: None)
    monkeypatch.setattr(ParseJsonOp, "_arrow_fast_path", lambda self, *a: None)
    exact = run("exact")                             # DuckDB's json_transform, row by row
    assert fast.schema == exact.schema and fast.num_rows == 120
    assert fast.to_pylist() == exact.to_pylist()
    assert sorted(fast.column("id").to_pylist()) == list(range(120))


def test_parse_json_while_reading_falls_back_on_unusual_values(kafka_broker, tmp_path, monkeypatch):
    """Null, blank, padded and multi-line values are not one object per line: the exact path decides."""
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [None, "", '  {"id": 7} ', '{"id":\n8}', '{"id": 9}'])
    taken = _spy_take(monkeypatch)
    got, fn = _collect()
    _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT", keep=["offset"]),
         tmp_path / "chk", fn)
    assert got[0].column("id").to_pylist() == [None, None, 7, 8, 9]
    assert got[0].column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert taken == [False]


def test_parse_json_counts_rows_per_value_not_per_batch(kafka_broker, tmp_path):
    """Two objects in one value beside a blank one add up to one row per value in a JSON-lines read;
    the value is still invalid JSON: the batch fails naming it (it is not split over two rows)."""
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, ['{"id": 1}{"id": 2}', "", '{"id": 3}'])
    got, fn = _collect()
    with pytest.raises(inc.StreamingQueryException, match=rf"topic {topic}, partition 0, offset 0"):
        _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT"), tmp_path / "chk", fn)
    assert got == {}


def test_parse_while_reading_only_in_the_local_runner(kafka_broker):
    """A Dagster read op stages the raw rows for another process and never enables it; the local
    runner does (enable_read_ahead). The parse is handed over once; a replay reads the same rows."""
    from increments.sources.kafka import KafkaSource
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(10)])
    src = KafkaSource(kafka_broker, topic=topic)
    schema = pa.schema([("id", pa.int64())])
    src.parse_values_as(schema)
    t = src.read({topic: {"0": 0}}, {topic: {"0": 5}})
    assert src.take_parsed(t, schema) is None                     # not enabled: nothing parsed ahead
    src.enable_read_ahead()
    t = src.read({topic: {"0": 0}}, {topic: {"0": 5}})
    parsed = src.take_parsed(t, schema)
    assert [n for n, _ in parsed] == [5] and parsed[0][1].column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert src.take_parsed(t, schema) is None                     # handed over once
    again = src.read({topic: {"0": 0}}, {topic: {"0": 5}})           # replay: the same rows
    assert again.equals(t)
    assert src.take_parsed(t, schema) is None                     # only for the last read's table
    src.close()


# -- a parse_json query reads neither the key nor the timestamp of each message unless it keeps them --
def test_parse_json_scan_skips_key_and_timestamp_unless_kept(kafka_broker, tmp_path):
    from increments.plan.compiler import Compiler
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(4)], keys=[f"k{i}".encode() for i in range(4)])
    src = inc.read_stream.kafka(kafka_broker, topic=topic)
    plain = Compiler().compile(src.parse_json("id BIGINT")._node)
    kept = Compiler().compile(src.parse_json("id BIGINT", keep=["key", "timestamp"])._node)
    assert sorted(plain.scan_columns[0]) == ["offset", "partition", "topic", "value"]
    assert kept.scan_columns == {}
    got, fn = _collect()
    _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT", keep=["key", "timestamp"]),
         tmp_path / "chk", fn)
    t = got[0]
    assert t.column("key").to_pylist() == [b"k0", b"k1", b"k2", b"k3"] and t.column("timestamp").null_count == 0
    got, fn = _collect()
    _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT"), tmp_path / "chk2", fn)
    assert got[0].column("id").to_pylist() == [0, 1, 2, 3]


def test_initial_offsets_are_fixed_once_on_an_object_store_checkpoint(kafka_broker, s3_bucket):
    """sources/<i>/initial.json is written create-only through the checkpoint's Location; a later
    start (or a concurrent runner) adopts it instead of resolving 'latest' again."""
    from increments import storage
    from increments.sources.kafka import KafkaSource
    topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(5)])
    chk = storage.location(f"{s3_bucket}/chk")
    first = KafkaSource(kafka_broker, topic=topic, starting_offsets="latest")
    first.open(chk, 0, "q")
    assert first.initial_offset() == {topic: {"0": 5}}
    assert chk.read_json("sources/0/initial.json") == {topic: {"0": 5}}
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(5, 8)])
    again = KafkaSource(kafka_broker, topic=topic, starting_offsets="latest")
    again.open(chk, 0, "q")
    assert again.initial_offset() == {topic: {"0": 5}}
    first.close()
    again.close()


def test_dead_letter_rows_of_a_new_checkpoint_with_the_same_name_are_written(kafka_broker, tmp_path):
    """The dead-letter table's transaction is keyed by query id: a query that keeps its name but starts
    on a new checkpoint (a new query id) writes its batch 0's bad rows too."""
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [json.dumps({"id": 1}), "{bad"])
    dlq = str(tmp_path / "dlq")
    for chk in ("chk1", "chk2"):
        got, fn = _collect()
        q = _run(inc.read_stream.kafka(kafka_broker, topic=topic)
                 .parse_json("id BIGINT", dead_letter=inc.dead_letter.delta(dlq)), tmp_path / chk, fn,
                 query_name="same_name")
        assert _ids(got) == [1]
        assert q.last_progress["dead_letters"] == {inc.dead_letter.delta(dlq).description: 1}
    bad = DeltaTable(dlq).to_pyarrow_table()
    assert bad.column("value").to_pylist() == [b"{bad", b"{bad"] and bad.column("batch_id").to_pylist() == [0, 0]


@pytest.mark.parametrize("value", [3.7, True, "42"])
def test_parse_json_does_not_coerce_a_wrong_type(kafka_broker, tmp_path, value):
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [json.dumps({"id": 1}), json.dumps({"id": value})])
    got, fn = _collect()
    with pytest.raises(inc.StreamingQueryException, match=rf"topic {topic}, partition 0, offset 1: field 'id'"):
        _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT"), tmp_path / "chk", fn)
    assert got == {}
    dlq = str(tmp_path / "dlq")
    _run(inc.read_stream.kafka(kafka_broker, topic=topic).parse_json("id BIGINT", dead_letter=inc.dead_letter.delta(dlq)),
         tmp_path / "chk2", fn)
    assert _ids(got) == [1]
    assert DeltaTable(dlq).to_pyarrow_table().column("offset").to_pylist() == [1]


_RECREATE_SCRIPT = """
import json, os, sys
_TESTS = {tests!r}
sys.path[:0] = [os.path.dirname(_TESTS)]
sys.path.append(_TESTS)
import increments as inc
import crashkit
c = json.loads(sys.argv[1])
if c.get("crash_batch") is not None:
    crashkit.crash_after([c["crash_batch"], c["crash_step"]])
out = c["out"]
def fn(table, batch_id):
    with open(os.path.join(out, f"{{batch_id}}.json"), "w") as f:
        json.dump(sorted(table.column("id").to_pylist()), f)
q = (inc.read_stream.kafka(c["broker"], topic=c["topic"], fail_on_data_loss=c["fail"]).parse_json("id BIGINT")
     .write_stream.foreach_batch(fn).checkpoint_location(c["chk"]).trigger(available_now=True).start())
q.await_termination()
"""


def test_recreated_topic_read_from_its_new_beginning_survives_a_kill(kafka_broker, tmp_path):
    """fail_on_data_loss=False: the batch that reads the recreated topic from its beginning is killed
    after its plan (offsets written) and after its read; each restart redoes it with the same rows."""
    import os
    import subprocess
    import sys
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "q.py"
    script.write_text(_RECREATE_SCRIPT.format(tests=tests))
    out = tmp_path / "out"
    out.mkdir()
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(5)])
    base = {"broker": kafka_broker, "topic": topic, "chk": str(tmp_path / "chk"), "out": str(out), "fail": True}

    def run(expect_kill=False, **kw):
        p = subprocess.run([sys.executable, str(script), json.dumps({**base, **kw})], capture_output=True, text=True,
                           timeout=300)
        assert (p.returncode == -9) if expect_kill else (p.returncode == 0), p.stderr[-2000:]
    run()
    delete_topic(kafka_broker, topic)
    create_topic(kafka_broker, topic)
    produce(kafka_broker, topic, [json.dumps({"id": 100 + i}) for i in range(8)])
    run(expect_kill=True, fail=False, crash_batch=1, crash_step="plan")
    run(expect_kill=True, fail=False, crash_batch=1, crash_step="read")
    run(fail=False)
    got = {int(f.split(".")[0]): json.load(open(out / f)) for f in os.listdir(out)}
    assert got == {0: list(range(5)), 1: [100 + i for i in range(8)]}


# -- read() over several partitions: the next partition is fetched ahead on a second consumer --------
def test_lost_ranges_between_partitions_read_ahead(kafka_broker):
    """Partitions are read one at a time on two consumers in turn (the next one assigned ahead);
    a range lost in one partition (past its end, or starting past it) does not disturb the
    partitions read ahead around it: each is read exactly, the loss is counted or raised."""
    from increments.sources.kafka import KafkaSource
    topic = create_topic(kafka_broker, partitions=4)
    for p in range(4):
        produce(kafka_broker, topic, [json.dumps({"p": p, "i": i}) for i in range(10)], partition=p)
    start = {topic: {"0": 2, "1": 0, "2": 12, "3": 0}}
    end = {topic: {"0": 10, "1": 15, "2": 15, "3": 10}}   # 1 ends at 10 (5 lost); 2 starts past its end (3 lost)
    src = KafkaSource(kafka_broker, topic=topic, fail_on_data_loss=False)
    for _ in range(2):                                      # a replay reads the same rows
        t = src.read(start, end)
        got = {(r["partition"], r["offset"]) for r in t.select(["partition", "offset"]).to_pylist()}
        assert t.num_rows == len(got) == 8 + 10 + 10
        assert got == ({(0, o) for o in range(2, 10)} | {(1, o) for o in range(10)} | {(3, o) for o in range(10)})
        assert [json.loads(v)["i"] for v in t.filter(pa.compute.equal(t.column("partition"), 3))
                .column("value").to_pylist()] == list(range(10))
        assert src.read_metrics["offsets_skipped"] == 8
    src.close()
    strict = KafkaSource(kafka_broker, topic=topic)
    with pytest.raises(inc.DataLossError, match=rf"topic '{topic}', partition 1: offsets \[10, 15\)"):
        strict.read(start, end)
    t = strict.read({topic: {"0": 0, "1": 0, "2": 0, "3": 0}}, {topic: {"0": 10, "1": 10, "2": 10, "3": 10}})
    assert sorted(t.column("partition").to_pylist()) == sorted(list(range(4)) * 10)   # the consumers recovered
    strict.close()


def test_available_now_assigns_the_next_batch_ahead_and_reads_each_row_once(kafka_broker, tmp_path, monkeypatch):
    """Under AvailableNow the local runner's read leaves its first consumer where the next batch
    starts (still assigned, having consumed exactly up to there, or assigned there ahead), and the
    plan of batch 0 assigns it where that batch starts; each batch consumes from it (no re-assign)
    and still reads exactly its range. (A rest small enough is read ahead instead: the next test;
    here none is.)"""
    import increments.sources.kafka.consume as consume_mod
    monkeypatch.setattr(consume_mod, "_STASH_OFFSETS", 0)
    topic = create_topic(kafka_broker, partitions=2)
    for p in range(2):
        produce(kafka_broker, topic, [json.dumps({"id": p * 100 + i}) for i in range(40)], partition=p)
    calls, assign = [], consume_mod._assign

    def spy(c, t, p, s):
        if sys._getframe(1).f_code.co_name == "_read_ranges":   # a read wanting c at (t, p, s)
            calls.append(((t, p, s), consume_mod._holds(c, t, p, s)))
        return assign(c, t, p, s)
    monkeypatch.setattr(consume_mod, "_assign", spy)
    got, fn = _collect()
    _run(inc.read_stream.kafka(kafka_broker, topic=topic, max_offsets_per_trigger=20)
         .parse_json("id BIGINT", keep=["partition", "offset"]), tmp_path / "chk", fn)
    assert len(got) == 4                                           # 10 offsets per partition per batch
    assert _ids(got) == sorted(p * 100 + i for p in range(2) for i in range(40))
    for b, t in got.items():
        assert sorted(zip(t.column("partition").to_pylist(), t.column("offset").to_pylist())) == \
            [(p, o) for p in range(2) for o in range(10 * b, 10 * b + 10)]
    first = {}
    for tps, ahead in calls:
        first.setdefault(tps, ahead)        # when a read first wanted this start: assigned already?
    # batch 0: assigned by its plan (latest_offset); later ones: left there by the previous read
    assert [first[(topic, 0, s)] for s in (0, 10, 20, 30)] == [True, True, True, True]
    assert [first[(topic, 1, s)] for s in (0, 10, 20, 30)] == [False] * 4   # read ahead within a read only


def test_available_now_reads_a_small_rest_once_and_leaves_no_consumer_fetching(kafka_broker, tmp_path, monkeypatch):
    """Under AvailableNow in the local runner, a partition's rest up to the target that is small is
    consumed with the first range read from it and kept for the next batches: those take their
    exact ranges without a consumer, and no consumer stays assigned (fetching) between batches.
    Rows, offsets and the parse done while reading are those of reading each range from the broker."""
    import increments.sources.kafka.consume as consume_mod
    from increments.sources.kafka import KafkaSource
    topic = create_topic(kafka_broker, partitions=2)
    for p in range(2):
        produce(kafka_broker, topic, [json.dumps({"id": p * 100 + i}) for i in range(40)], partition=p)
    monkeypatch.setattr(consume_mod, "_PARSE_BYTES", 100)    # several chunks kept, handed over as pieces
    consumed = _spy_consumed(monkeypatch)
    assigned, read = [], KafkaSource.read

    def spy_read(self, start, end, columns=None):
        out = read(self, start, end, columns)
        assigned.append([c.held for c in self._reader_pair])
        return out
    monkeypatch.setattr(KafkaSource, "read", spy_read)
    taken = _spy_take(monkeypatch)
    got, fn = _collect()
    _run(inc.read_stream.kafka(kafka_broker, topic=topic, max_offsets_per_trigger=20)
         .parse_json("id BIGINT", keep=["partition", "offset"]), tmp_path / "chk", fn)
    assert len(got) == 4 and all(taken)
    for b, t in got.items():
        assert sorted(zip(t.column("partition").to_pylist(), t.column("offset").to_pylist(),
                          t.column("id").to_pylist())) == \
            [(p, o, p * 100 + o) for p in range(2) for o in range(10 * b, 10 * b + 10)]
    # batch 0 read [0, 10) of each partition, then the rest [10, 40); nothing else from the broker
    assert consumed == [(0, 0, 10), (0, 10, 40), (1, 0, 10), (1, 10, 40)]
    assert assigned == [[None, None]] * 4


def test_a_rest_read_ahead_serves_only_the_ranges_that_follow_it(kafka_broker):
    """read() with the AvailableNow target known in the local runner keeps the rest [e, target) of a
    small partition (see the test above); a read that starts elsewhere (a replay) or reads other
    columns drops it and reads the broker: the same rows either way."""
    from increments.sources.kafka import KafkaSource
    topic = create_topic(kafka_broker)
    produce(kafka_broker, topic, [json.dumps({"id": i}) for i in range(30)], keys=[b"k%d" % i for i in range(30)])
    src = KafkaSource(kafka_broker, topic=topic)
    src.enable_read_ahead()
    src.prepare_available_now()
    assert src.available_now_target() == {topic: {"0": 30}}

    def rng(s, e, columns=None):
        return src.read({topic: {"0": s}}, {topic: {"0": e}}, columns)
    first = rng(0, 10)
    assert src._stashed(topic, 0, 10)
    second = rng(10, 20)
    assert second.column("offset").to_pylist() == list(range(10, 20))
    assert second.column("key").to_pylist() == [b"k%d" % i for i in range(10, 20)]
    assert src._stashed(topic, 0, 20)                      # taken from the rest kept
    assert rng(0, 10).equals(first)                        # a replay: from the broker, the same rows
    assert src._stashed(topic, 0, 10)                      # ... which keeps the rest again
    rest = rng(10, 30, columns=["value", "offset"])      # other columns: not the stash's
    assert rest.column("offset").to_pylist() == list(range(10, 30)) and rest.column("key").null_count == 20
    assert [json.loads(v)["id"] for v in rng(20, 30).column("value").to_pylist()] == list(range(20, 30))
    src.close()


@pytest.mark.parametrize("case", ["cap", "null"])
def test_a_rest_not_read_ahead_is_read_by_its_own_batches(kafka_broker, tmp_path, monkeypatch, case):
    """A rest beyond the stashes' room (cap: room for one partition's rest only) or holding anything
    but plain messages (null: a tombstone in partition 1's rest) is not kept: those batches consume
    their own ranges from the broker, with the same rows."""
    import increments.sources.kafka.consume as consume_mod
    topic = create_topic(kafka_broker, partitions=2)
    for p in range(2):
        values = [json.dumps({"id": p * 100 + i}) for i in range(40)]
        if case == "null" and p == 1:
            values[25] = None
        produce(kafka_broker, topic, values, partition=p)
    if case == "cap":
        monkeypatch.setattr(consume_mod, "_STASH_OFFSETS", 30)
    consumed = _spy_consumed(monkeypatch)
    got, fn = _collect()
    _run(inc.read_stream.kafka(kafka_broker, topic=topic, max_offsets_per_trigger=20)
         .parse_json("id BIGINT", keep=["partition", "offset"]), tmp_path / "chk", fn)
    assert len(got) == 4
    for b, t in got.items():
        assert sorted(zip(t.column("partition").to_pylist(), t.column("offset").to_pylist())) == \
            [(p, o) for p in range(2) for o in range(10 * b, 10 * b + 10)]
        assert sorted(i for i in t.column("id").to_pylist() if i is not None) == \
            [p * 100 + o for p in range(2) for o in range(10 * b, 10 * b + 10) if (p, o) != (1, 25) or case == "cap"]
    tried = [(0, 0, 10), (0, 10, 40), (1, 0, 10)] + ([(1, 10, 40)] if case == "null" else [])
    assert consumed == tried + [(1, s, s + 10) for s in (10, 20, 30)]

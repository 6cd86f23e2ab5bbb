"""Done-when of the Kafka/Delta issue: Kafka -> (windowed count | stateless) -> Delta and PostgreSQL
survives a SIGKILL after each protocol step, on a real broker: every output row exactly once.

The query runs in a subprocess (this file run as a script); a listener SIGKILLs it right after
step `step` of batch 1. The rerun redoes batch 1 from offsets[1] and the sink skips or completes
what it holds, by Delta app transaction (query id, batch id) or the PostgreSQL batch marker.
The query is the README's windowed count (append mode, watermark).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

if __name__ == "__main__":  # run as a script, sys.path[0] is tests/, whose state/ would shadow the state package
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402

N_EVENTS = 360


def build_query(bootstrap: str, topic: str, checkpoint: str, sink: str, target: str, pg_url: str):
    import increments as inc
    from increments import functions as F
    events = (inc.read_stream.kafka(bootstrap_servers=bootstrap, topic=topic, max_offsets_per_trigger=100)
              .parse_json("id BIGINT, user_id STRING, event_time TIMESTAMP"))
    frame = (events.with_watermark("event_time", "2 minutes")
             .group_by(F.window("event_time", "1 minute"), "user_id").count())
    w = (frame.write_stream.output_mode("append").checkpoint_location(checkpoint).query_name("kafka_exactly_once")
         .trigger(available_now=True))
    if sink == "delta":
        return w.format("delta").start(target)
    return w.format("postgres").option("url", pg_url).option("table", target).start()


def _main() -> None:
    import increments as inc
    bootstrap, topic, checkpoint, sink, target, pg_url = sys.argv[1:7]
    if len(sys.argv) > 7:
        crash_batch, crash_step = int(sys.argv[7]), sys.argv[8]

        class CrashAt(inc.StreamingQueryListener):
            def on_batch_step(self, query_name, batch_id, step):
                if batch_id == crash_batch and step == crash_step:
                    os.kill(os.getpid(), signal.SIGKILL)
        inc.streams.add_listener(CrashAt())
    build_query(bootstrap, topic, checkpoint, sink, target, pg_url).await_termination()


# ---------------------------------------------------------------------------------------------
def _run(args, expect_kill=False):
    p = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if expect_kill:
        assert p.returncode == -9, f"expected SIGKILL, got {p.returncode}: {p.stderr[-3000:]}"
    else:
        assert p.returncode == 0, p.stderr[-3000:]


def _output(sink, target, pg_url):
    """(window as JSON, user_id, count) rows, sorted. Delta through increments' reader, not
    DeltaTable.to_pyarrow_table() (which can abort the process at exit: sinks/delta.read_table)."""
    if sink == "delta":
        from increments.sinks.delta import read_table
        t, _ = read_table(target)
        rows = zip(*(t.column(c).to_pylist() for c in ("window", "user_id", "count")))
        return sorted((json.dumps(r[0], default=str), *r[1:]) for r in rows)
    import sqlalchemy as sa
    with sa.create_engine(pg_url, poolclass=sa.pool.NullPool).connect() as c:
        rows = [tuple(r) for r in c.execute(sa.text(f"SELECT window_start, window_end, user_id, count FROM {target}"))]
    return sorted((json.dumps({"start": r[0], "end": r[1]}, default=str), r[2], r[3]) for r in rows)


@pytest.fixture(scope="module")
def events_topic(kafka_broker):
    from datetime import datetime, timedelta, timezone

    from broker import create_topic, produce
    topic = create_topic(kafka_broker, partitions=3)
    base = datetime(2024, 1, 1, tzinfo=timezone.utc)
    for p in range(3):
        produce(kafka_broker, topic, [json.dumps({"id": i, "user_id": f"u{i % 4}",
                                                  "event_time": (base + timedelta(seconds=3 * i)).isoformat()})
                                      for i in range(p, N_EVENTS, 3)], partition=p)
    return topic


@pytest.fixture(scope="module")
def reference(kafka_broker, events_topic, pg_url, tmp_path_factory):
    """The output of an uninterrupted run, per sink."""
    out = {}
    for sink in ("delta", "postgres"):
        d = tmp_path_factory.mktemp("ref")
        target = str(d / "out") if sink == "delta" else "ref_" + uuid.uuid4().hex[:8]
        _run([kafka_broker, events_topic, str(d / "chk"), sink, target, pg_url])
        out[sink] = _output(sink, target, pg_url)
    return out


@pytest.mark.faults
@pytest.mark.kafka
@pytest.mark.parametrize("sink", ["delta", "postgres"])
@pytest.mark.parametrize("step", ["plan", "read", "process", "write", "commit"])
def test_sigkill_after_each_step_leaves_each_row_once(kafka_broker, events_topic, pg_url, reference, tmp_path,
                                                      sink, step):
    target = str(tmp_path / "out") if sink == "delta" else "out_" + uuid.uuid4().hex[:8]
    args = [kafka_broker, events_topic, str(tmp_path / "chk"), sink, target, pg_url]
    _run(args + ["1", step], expect_kill=True)
    _run(args)
    got = _output(sink, target, pg_url)
    assert got == reference[sink]
    keys = [(r[0], r[1]) for r in got]
    assert len(keys) == len(set(keys))
    # events every 3 s for 18 minutes; the final watermark (max - 2 min) closes the first 15 windows
    assert len(got) == 15 * 4 and {r[2] for r in got} == {5}
    if sink == "delta":
        from deltalake import DeltaTable
        from increments.checkpoint.metadata import read_json
        qid = read_json(os.path.join(str(tmp_path / "chk"), "metadata.json"))["id"]
        assert DeltaTable(target).transaction_version(qid) >= 3   # 360 rows at 100 per batch: batches 0..3


if __name__ == "__main__":
    _main()

"""A filter after with_watermark, split at its ANDs as Apache Spark 4.3.0 splits it, compared batch
by batch with Spark on the same files (filter_split_spark_expected.py, recorded by
docs/spark/record_filter_split.py): rows, watermark, num_input_rows and the aggregation's state
counts. The conjuncts without the event-time column go below the watermark (the rows they drop do
not move it), the others stay above; a string literal spelling the column's name does not count
as a reference to it. Also the split itself (plan/pushdown.split_around_watermark)."""
from __future__ import annotations

import datetime as dt
import uuid

import pytest

import increments as inc
from increments import functions as F
from increments.plan.pushdown import split_around_watermark
from jsonl_testutil import write_files

from filter_split_scenarios import FILES, SCENARIOS, SCHEMA
from filter_split_spark_expected import EXPECTED


def _norm(v):
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, dict):
        return tuple(_norm(x) for x in v.values())
    return v


def _run(tmp_path, name):
    sc = SCENARIOS[name]
    d = write_files(str(tmp_path / "in"), FILES)
    frame = inc.read_stream.files(d, "json", SCHEMA, max_files_per_trigger=1).with_watermark("ts", "10 minutes")
    for step in sc.get("before", []):
        frame = frame.select(*step[1]) if step[0] == "select" else frame.with_column(step[1], step[2])
    for c in sc["filters"]:
        frame = frame.filter(c)
    frame = frame.group_by(F.window("ts", "10 minutes")).count()
    qname = "fsplit_" + uuid.uuid4().hex[:8]
    q = (frame.write_stream.format("memory").query_name(qname).output_mode(sc.get("output_mode", "append"))
         .trigger(available_now=True).checkpoint_location(str(tmp_path / "chk")).option("state_store", "memory").start())
    q.await_termination()
    batches = {b: sorted((tuple(_norm(v) for v in r.values()) for r in t.to_pylist()), key=repr)
               for b, t in sorted(inc.memory_batches(qname).items())}
    return batches, q.recent_progress, frame.schema.names


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_same_as_spark(tmp_path, name):
    exp = EXPECTED[name]
    batches, progress, columns = _run(tmp_path, name)
    assert columns == exp["columns"]
    assert [p["batch_id"] for p in progress] == list(range(len(exp["watermarks"])))
    assert [p["event_time"]["watermark"] for p in progress] == exp["watermarks"]
    assert batches == {b: list(rows) for b, rows in exp["batches"].items()}
    assert [p["num_input_rows"] for p in progress] == exp["num_input_rows"]
    assert [[(o["operator_name"], o["num_rows_total"], o["num_rows_updated"], o["num_rows_removed"],
              o["num_rows_dropped_by_watermark"]) for o in p["state_operators"]] for p in progress] == \
        [[tuple(s) for s in st] for st in exp["state"]]


def test_split_at_conjuncts_from_the_parsed_expression():
    down, up = split_around_watermark("v >= 3 AND ts < TIMESTAMP '2024-01-01 11:00:00' AND k != 'ts'", "ts")
    assert [s.replace(" ", "") for s in down] == ["(v>=3)", "(k!='ts')"]
    assert [s.replace(" ", "") for s in up] == ["(ts<CAST('2024-01-0111:00:00'ASTIMESTAMP))"]
    # whole on one side: the text is kept as written
    assert split_around_watermark("campaign_id = 'event_time'", "event_time") == (["campaign_id = 'event_time'"], [])
    assert split_around_watermark("v > 1 OR ts IS NULL", "ts") == ([], ["v > 1 OR ts IS NULL"])
    # qualified and differently cased references count; a struct field of another column does not
    assert split_around_watermark('"__in"."TS" > 1', "ts") == ([], ['"__in"."TS" > 1'])
    assert split_around_watermark("payload.ts > 1", "ts")[1] == ["payload.ts > 1"]   # alias.column: conservative
    # a non-deterministic conjunct stays above (Spark pushes only deterministic ones)
    assert split_around_watermark("random() < 0.5", "ts") == ([], ["random() < 0.5"])
    # not parseable by DuckDB: kept above, whole
    assert split_around_watermark("v >= (3", "ts") == ([], ["v >= (3"])


def test_split_through_a_projection():
    from increments.plan import nodes as n
    from increments.plan.pushdown import split_through_projection
    cond = "v >= 3 AND w > 1"
    # a column the node passes on unchanged goes below; a computed one stays above
    assert split_through_projection(cond, n.WithColumn(None, "w", "v * 10")) == (["(v >= 3)"], ["(w > 1)"])
    assert split_through_projection(cond, n.Select(None, ("k", '"v"', "v * 10 AS w"))) == (["(v >= 3)"], ["(w > 1)"])
    # not through a non-deterministic projection (as Spark), nor a star select (columns unknown here)
    assert split_through_projection("v >= 3", n.WithColumn(None, "w", "random()")) == ([], ["v >= 3"])
    assert split_through_projection("v >= 3", n.Select(None, ("*",))) == ([], ["v >= 3"])

"""UDFs (row and pandas), mapInArrow and mapInPandas before windowed aggregations, against Apache
Spark 4.3.0: every scenario of udf_scenarios.py, recorded from real Spark on the same files
(udf_spark_expected.py, by docs/spark/record_udf.py), run through increments with the same query
function and compared batch by batch: batch ids (with the trailing no-data batch), the rows of each
batch, column names (a UDF key is named fn(arg) as Spark names it), the watermark, num_input_rows
and the state operator's (name, total, updated, removed, dropped by watermark).

Covered: a UDF filter right after with_watermark goes below it as Spark's pushdown puts it (the row
it drops never feeds the watermark); a UDF grouping key; a UDF in select before with_watermark; a
pandas UDF in with_column summed per window; mapInArrow / mapInPandas then with_watermark; and
with_watermark before mapInArrow, refused in append mode as Spark refuses it (the map's output
columns carry no watermark)."""
from __future__ import annotations

import datetime as dt
import uuid

import pytest

import increments as inc
from increments import functions as F
from increments.errors import AnalysisException
from jsonl_testutil import write_files

from udf_scenarios import SCENARIOS, SCHEMA, query
from udf_spark_expected import EXPECTED


def _norm(v):
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, dict):
        return tuple(_norm(x) for x in v.values())
    return v


def _run(tmp_path, name):
    src = inc.read_stream.files(write_files(str(tmp_path / name), SCENARIOS[name]), "json", SCHEMA,
                                max_files_per_trigger=1)
    frame = query(name, src, F)
    qname = "udfp_" + uuid.uuid4().hex[:8]
    q = (frame.write_stream.format("memory").query_name(qname).output_mode("append").trigger(available_now=True)
         .checkpoint_location(str(tmp_path / ("chk_" + qname))).option("state_store", "memory").start())
    q.await_termination()
    batches = {b: sorted((tuple(_norm(v) for v in r.values()) for r in t.to_pylist()), key=repr)
               for b, t in sorted(inc.memory_batches(qname).items())}
    return batches, q.recent_progress, frame.schema.names


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if "error" not in EXPECTED[n]))
def test_same_as_spark(tmp_path, name):
    exp = EXPECTED[name]
    batches, progress, columns = _run(tmp_path, name)
    assert columns == exp["columns"]
    assert [p["batch_id"] for p in progress] == list(range(len(exp["watermarks"])))
    assert batches == {b: list(rows) for b, rows in exp["batches"].items()}
    assert [p["event_time"]["watermark"] for p in progress] == exp["watermarks"]
    assert [p["num_input_rows"] for p in progress] == exp["num_input_rows"]
    assert [[(o["operator_name"], o["num_rows_total"], o["num_rows_updated"], o["num_rows_removed"],
              o["num_rows_dropped_by_watermark"]) for o in p["state_operators"]] for p in progress] == \
        [list(s) for s in exp["state"]]


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if "error" in EXPECTED[n]))
def test_refused_as_spark_refuses(tmp_path, name):
    with pytest.raises(AnalysisException, match="does not reach past it"):
        _run(tmp_path, name)

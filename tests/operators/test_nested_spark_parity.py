"""Nested data and generators against Apache Spark 4.3.0: every scenario of nested_scenarios.py,
recorded from real Spark on the same files (nested_spark_expected.py, by docs/spark/record_nested.py),
run through increments and compared batch by batch: the batch ids (with the trailing no-data
batch), the rows of each batch, the column names, the watermark, num_input_rows and every stateful
operator's (name, num_rows_total, updated, removed, dropped_by_watermark). Queries Spark refuses
(or batches it fails) must be refused (or fail) here too, after the same committed batches.

Covered: explode / explode_outer / posexplode(_outer) of arrays and maps, stateless and before a
window aggregation or a dedup (explode's implied `size(x) > 0` goes below the watermark: rows
without elements never move it); STRUCT, ARRAY and map-value keys in window aggregations (append,
update, complete); dropDuplicates on a STRUCT; Spark's addressing (`e.user.id`, `e.*`, `tags[0]`,
`attrs['k']`, size) in filter and select; an index out of range (ANSI) failing its batch."""
from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter

import pytest

import increments as inc
from increments import functions as F
from jsonl_testutil import write_files

from nested_scenarios import SCENARIOS

try:
    from nested_spark_expected import EXPECTED
except ImportError:  # not recorded yet
    EXPECTED = {}


def query(name, src):
    a = src["a"]
    W = F.window("ts", "10 minutes")
    if name == "explode_window":
        return a.select("id", "ts", F.explode("tags").alias("tag")).group_by(W, "tag").count()
    if name == "explode_outer_window":
        return a.select("id", "ts", F.explode_outer("tags").alias("tag")).group_by(W, "tag").count()
    if name == "posexplode_window_update":
        return a.select("ts", F.posexplode("tags")).group_by(W, "pos").agg(F.count(), F.max("col"))
    if name == "explode_dedup":
        return a.select("id", "ts", F.explode("tags").alias("tag")).drop_duplicates(["tag", "ts"])
    if name == "posexplode_stateless":
        return a.select("id", F.posexplode("tags"))
    if name == "posexplode_outer_stateless":
        return a.select("id", F.posexplode_outer("tags"))
    if name == "explode_map_stateless":
        return a.select("ts", F.explode("attrs"))
    if name == "nested_select_filter":
        return a.filter("e.user.country = 'fr'").select("ts", "e.user.id", "e.*", "tags[0]", "attrs['k']",
                                                        "size(tags) AS n_tags")
    if name == "struct_key_window":
        return a.group_by(W, "e").count()
    if name == "struct_key_window_update":
        return a.group_by(W, "e").agg(F.count(), F.max("tags"), F.min("e.n"))
    if name == "nested_field_keys_update":
        b = a.select("ts", "e.user.country AS country", "e.n AS n", "tags")
        return b.group_by(W, "country").agg(F.sum("n"), F.min("tags"), F.count())
    if name == "struct_dedup":
        return a.drop_duplicates(["e", "ts"]).select("ts", "e", "e.user.id")
    if name == "list_key_complete":
        return a.group_by("tags").count()
    if name == "map_value_key_update":
        return a.select("ts", "attrs['k'] AS k").group_by(W, "k").count()
    if name == "explode_map_window":
        return a.select("ts", F.explode("attrs")).group_by(W, "key").agg(F.sum("value"), F.count())
    if name == "index_out_of_range":
        return a.select("ts", "tags[1] AS second")
    if name == "map_key_complete":
        return a.group_by("attrs").count()
    if name == "nested_dedup_key":
        return a.drop_duplicates(["e.n"])
    if name == "struct_key_session":
        return a.group_by(F.session_window("ts", "5 minutes"), "e").agg(F.count())
    if name == "explode_outer_map_dedup":
        return a.select("ts", F.explode_outer("attrs")).drop_duplicates(["key", "ts"])
    if name == "posexplode_map_window_update":
        return a.select("ts", F.posexplode("attrs")).group_by(W, "pos", "key").agg(F.sum("value"))
    raise KeyError(name)


def norm(v):
    """As docs/spark/record_nested.py: structs as tuples, maps as ("map", sorted pairs)."""
    if isinstance(v, dt.datetime):
        v = v.astimezone(dt.timezone.utc)
        s = v.strftime("%Y-%m-%d %H:%M:%S")
        return s + (f".{v.microsecond:06d}" if v.microsecond else "")
    if isinstance(v, dict):
        return tuple(norm(x) for x in v.values())
    if isinstance(v, list):
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):     # a MAP (Arrow: key/value pairs)
            return ("map", tuple(sorted((norm(k), norm(x)) for k, x in v)))
        return [norm(x) for x in v]
    return v


def run(tmp, name):
    src = {}
    for s, (schema, wm, files) in SCENARIOS[name]["sources"].items():
        d = write_files(str(tmp / name / s), files)
        f = inc.read_stream.files(d, "json", schema, max_files_per_trigger=1)
        src[s] = f.with_watermark(*wm) if wm else f
    frame = query(name, src)
    qname = "nested_" + uuid.uuid4().hex[:8]
    q = (frame.write_stream.format("memory").query_name(qname).output_mode(SCENARIOS[name].get("output_mode", "append"))
         .trigger(available_now=True).checkpoint_location(str(tmp / ("chk_" + qname))).option("state_store", "memory")
         .start())
    error = None
    try:
        q.await_termination()
    except Exception as e:  # noqa: BLE001 - compared with Spark's failure below
        error = e
    types = {}
    batches = {}
    for b, t in sorted(inc.memory_batches(qname).items()):
        types = {f.name: f.type for f in t.schema}
        rows = []
        for r in t.to_pylist():
            rows.append(tuple(_typed_norm(v, types[k]) for k, v in r.items()))
        batches[b] = sorted(rows, key=repr)
    return batches, q.recent_progress, list(types), error


def _typed_norm(v, t):
    import pyarrow as pa
    if pa.types.is_map(t):
        return None if v is None else ("map", tuple(sorted((norm(k), norm(x)) for k, x in v)))
    if pa.types.is_list(t):
        return None if v is None else [_typed_norm(x, t.value_type) for x in v]
    if pa.types.is_struct(t):
        return None if v is None else tuple(_typed_norm(v[t.field(i).name], t.field(i).type) for i in range(t.num_fields))
    return norm(v)


def _state(progress) -> list[Counter]:
    return [Counter((o["operator_name"], o["num_rows_total"], o["num_rows_updated"], o["num_rows_removed"],
                     o["num_rows_dropped_by_watermark"]) for o in p["state_operators"]) for p in progress]


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if "error" not in EXPECTED[n]))
def test_same_as_spark(tmp_path, name):
    exp = EXPECTED[name]
    batches, progress, columns, error = run(tmp_path, name)
    assert error is None
    assert columns == exp["columns"]
    assert [p["batch_id"] for p in progress] == list(range(len(exp["watermarks"])))
    assert batches == {b: list(rows) for b, rows in exp["batches"].items()}
    assert [p["event_time"].get("watermark") for p in progress] == exp["watermarks"]
    assert [p["num_input_rows"] for p in progress] == exp["num_input_rows"]
    assert _state(progress) == [Counter(s) for s in exp["state"]]


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if "error" in EXPECTED[n]))
def test_refused_or_failed_as_spark(tmp_path, name):
    """A query Spark refuses is refused before any batch; a batch Spark fails fails here, after the
    same committed batches."""
    exp = EXPECTED[name]
    if exp["at"] in ("plan", "start"):
        with pytest.raises(Exception):
            run(tmp_path, name)
        return
    batches, _, _, error = run(tmp_path, name)
    assert error is not None
    assert batches == {b: list(rows) for b, rows in exp["batches"].items()}

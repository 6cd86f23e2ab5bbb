"""Spark's spelling of nested access in select / filter / with_column (plan/spark_sql.py) and the
generators, on the memory source: names as Spark gives them, 0-based ARRAY subscripts (out of range
fails the batch, ANSI), MAP lookups, size/get, F.col on nested fields, explode in with_column."""
from __future__ import annotations

import uuid

import pytest

import increments as inc
from increments import functions as F
from increments.errors import AnalysisException

SCHEMA = "id BIGINT, e STRUCT<user: STRUCT<id: STRING, c: STRING>, n: INT>, tags ARRAY<STRING>, m MAP<STRING, BIGINT>"
ROWS = [{"id": 1, "e": {"user": {"id": "u1", "c": "fr"}, "n": 1}, "tags": ["a", "b"], "m": [("k", 1), ("j", 2)]},
        {"id": 2, "e": None, "tags": None, "m": None},
        {"id": 3, "e": {"user": None, "n": 3}, "tags": [], "m": []}]


def _out(build, tmp_path, rows=ROWS):
    src = inc.read_stream.memory(SCHEMA)
    name = "nex_" + uuid.uuid4().hex[:8]
    q = build(src).write_stream.format("memory").query_name(name).checkpoint_location(str(tmp_path / name)).start()
    src.add_data(rows)
    try:
        q.process_all_available()
    finally:
        q.stop()
    t = inc.memory_batches(name).get(0)
    return t.column_names, sorted(t.to_pylist(), key=repr)


def test_fields_subscripts_and_names_as_spark(tmp_path):
    names, rows = _out(lambda s: s.filter("id = 1").select("e.user.id", "e.*", "tags[0]", "tags[1] AS second",
                                                           "m['k']", "m['nope']", "size(tags)", "size(m) AS n_m"),
                       tmp_path)
    assert names == ["id", "user", "n", "tags[0]", "second", "m[k]", "m[nope]", "size(tags)", "n_m"]
    assert rows == [{"id": "u1", "user": {"id": "u1", "c": "fr"}, "n": 1, "tags[0]": "a", "second": "b",
                     "m[k]": 1, "m[nope]": None, "size(tags)": 2, "n_m": 2}]


def test_nulls_give_null_and_deeper_stars_expand(tmp_path):
    names, rows = _out(lambda s: s.filter("id = 2").select("e.user.*", "size(tags) AS n", "get(tags, 5) AS g",
                                                           "tags[0] AS t0", "m['k'] AS k"), tmp_path)
    assert names == ["id", "c", "n", "g", "t0", "k"]
    assert rows == [{"id": None, "c": None, "n": None, "g": None, "t0": None, "k": None}]
    _, rows = _out(lambda s: s.filter("id = 1").select("get(tags, 5) AS g", "get(tags, 0) AS g0"), tmp_path)
    assert rows == [{"g": None, "g0": "a"}]


def test_an_index_out_of_range_fails_the_batch_naming_it(tmp_path):
    with pytest.raises(Exception, match=r"INVALID_ARRAY_INDEX.*index 0 is out of bounds.*0 elements.*tags\[0\]"):
        _out(lambda s: s.select("id", "tags[0] AS t"), tmp_path)


def test_filter_and_with_column_on_nested_fields(tmp_path):
    names, rows = _out(lambda s: s.filter("e.user.c = 'fr' AND tags[1] = 'b'").with_column("k", "m['k'] * 10")
                       .select("id", "k"), tmp_path)
    assert rows == [{"id": 1, "k": 10}]


def test_f_col_on_nested_fields_and_items(tmp_path):
    names, rows = _out(lambda s: s.filter("id = 1").select(
        F.col("e.user.id"), F.col("tags").getItem(1).alias("t1"), F.col("m").getItem("j").alias("j"),
        F.col("e").getField("n").alias("n"), F.col("`id`").alias("plain")), tmp_path)
    assert rows == [{"id": "u1", "t1": "b", "j": 2, "n": 1, "plain": 1}]


def test_generators_in_select_with_column_and_sql_text(tmp_path):
    _, rows = _out(lambda s: s.with_column("tag", F.explode("tags")).select("id", "tag"), tmp_path)
    assert rows == [{"id": 1, "tag": "a"}, {"id": 1, "tag": "b"}]
    _, rows = _out(lambda s: s.select("id", "posexplode_outer(m) AS (p, k, v)"), tmp_path)
    assert rows == sorted([{"id": 1, "p": 0, "k": "k", "v": 1}, {"id": 1, "p": 1, "k": "j", "v": 2},
                           {"id": 2, "p": None, "k": None, "v": None}, {"id": 3, "p": None, "k": None, "v": None}],
                          key=repr)


@pytest.mark.parametrize("build, message", [
    (lambda s: s.select(F.explode("tags"), F.explode("m")), "only one generator"),
    (lambda s: s.select(F.explode("id")), "needs an ARRAY or MAP argument"),
    (lambda s: s.with_column("x", F.posexplode("tags")), "yields 2 columns"),
    (lambda s: s.select(F.explode("m").alias("only_one")), "1 alias"),
])
def test_generator_misuse_is_refused_before_any_batch(build, message):
    with pytest.raises(AnalysisException, match=message):
        build(inc.read_stream.memory(SCHEMA)).schema


def test_struct_named_struct_to_json_and_from_json(tmp_path):
    def build(s):
        return s.filter("id = 1").select(
            F.struct("id", "e.n").alias("st"), "named_struct('x', id, 'c', e.user.c) AS ns",
            F.to_json(F.struct("id", "tags")).alias("j"),
            F.from_json("'{\"a\": 5, \"b\": [1, \"x\"], \"z\": 1}'", "a INT, b ARRAY<STRING>").alias("fj"),
            "CAST(e AS STRUCT(\"user\" STRUCT(id VARCHAR, c VARCHAR), n BIGINT)).n AS cast_n")
    _, rows = _out(build, tmp_path)
    assert rows == [{"st": {"id": 1, "n": 1}, "ns": {"x": 1, "c": "fr"}, "j": '{"id":1,"tags":["a","b"]}',
                     "fj": {"a": 5, "b": ["1", "x"]}, "cast_n": 1}]

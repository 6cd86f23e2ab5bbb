"""Nested columns through state: STRUCT and list columns as group_by / drop_duplicates /
transform_with_state keys (a NULL struct and a struct of NULLs are different groups, as in Spark),
min/max of a struct, and MAP keys refused as Spark refuses them."""
from __future__ import annotations

import uuid

import pytest

import increments as inc
from increments import functions as F
from increments.errors import AnalysisException

SCHEMA = "id BIGINT, e STRUCT<user: STRING, n: INT>, tags ARRAY<STRING>, m MAP<STRING, BIGINT>"
B0 = [{"id": 1, "e": {"user": "a", "n": 1}, "tags": ["x"], "m": [("k", 1)]},
      {"id": 2, "e": {"user": None, "n": None}, "tags": [], "m": None},
      {"id": 3, "e": None, "tags": None, "m": None}]
B1 = [{"id": 4, "e": {"user": "a", "n": 1}, "tags": ["x"], "m": None},
      {"id": 5, "e": {"user": None, "n": None}, "tags": ["x", "y"], "m": None},
      {"id": 6, "e": {"user": "b", "n": 0}, "tags": [], "m": None}]


def _run(build, tmp_path, mode="update", store="rocksdb"):
    src = inc.read_stream.memory(SCHEMA)
    name = "nst_" + uuid.uuid4().hex[:8]
    q = (build(src).write_stream.format("memory").query_name(name).output_mode(mode)
         .checkpoint_location(str(tmp_path / name)).option("state_store", store).start())
    out = {}
    for b, rows in enumerate((B0, B1)):
        src.add_data(rows)
        q.process_all_available()
        out[b] = inc.memory_batches(name).get(b)
    q.stop()
    return {b: (sorted(t.to_pylist(), key=repr) if t is not None else []) for b, t in out.items()}


@pytest.mark.parametrize("store", ["rocksdb", "memory"])
def test_struct_and_list_group_keys_across_batches(tmp_path, store):
    got = _run(lambda s: s.group_by("e").agg(F.count(), F.max("tags")), tmp_path, store=store)
    assert got[1] == sorted([{"e": {"user": "a", "n": 1}, "count": 2, "max(tags)": ["x"]},
                             {"e": {"user": None, "n": None}, "count": 2, "max(tags)": ["x", "y"]},
                             {"e": {"user": "b", "n": 0}, "count": 1, "max(tags)": []}], key=repr)
    got = _run(lambda s: s.group_by("tags").agg(F.count(), F.min("e")), tmp_path, mode="complete", store=store)
    assert got[1] == sorted([{"tags": ["x"], "count": 2, "min(e)": {"user": "a", "n": 1}},
                             {"tags": [], "count": 2, "min(e)": {"user": None, "n": None}},
                             {"tags": None, "count": 1, "min(e)": None},
                             {"tags": ["x", "y"], "count": 1, "min(e)": {"user": None, "n": None}}], key=repr)


def test_drop_duplicates_on_a_struct_key(tmp_path):
    got = _run(lambda s: s.drop_duplicates(["e"]).select("id"), tmp_path, mode="append")
    assert got == {0: [{"id": 1}, {"id": 2}, {"id": 3}], 1: [{"id": 6}]}


def test_map_dedup_keys_are_refused_like_spark(tmp_path):
    src = inc.read_stream.memory(SCHEMA)
    with pytest.raises(AnalysisException, match=r"'m' .*MAP.* cannot be a key.*SET_OPERATION_ON_MAP_TYPE"):
        src.drop_duplicates(["m"]).schema


def test_map_group_keys_group_whatever_the_entry_order(tmp_path):
    src = inc.read_stream.memory(SCHEMA)
    name = "nst_" + uuid.uuid4().hex[:8]
    q = (src.group_by("m").count().write_stream.format("memory").query_name(name).output_mode("complete")
         .checkpoint_location(str(tmp_path / name)).start())
    src.add_data([{"id": 1, "m": [("a", 1), ("b", 2)]}, {"id": 2, "m": [("b", 2), ("a", 1)]}, {"id": 3, "m": None}])
    q.process_all_available()
    src.add_data([{"id": 4, "m": [("b", 2), ("a", 1)]}, {"id": 5, "m": []}])
    q.process_all_available()
    q.stop()
    got = sorted(inc.memory_batches(name)[1].to_pylist(), key=repr)
    assert got == sorted([{"m": [("a", 1), ("b", 2)], "count": 3}, {"m": None, "count": 1}, {"m": [], "count": 1}],
                         key=repr)


class _TagsSeen(inc.StatefulProcessor):
    """Per STRUCT key: the tags seen so far (a list in value state) and the rows counted."""
    def init(self, handle):
        self.seen = handle.get_value_state("seen", "tags ARRAY<STRING>, n BIGINT")

    def handle_input_rows(self, key, rows, timer_values):
        cur = self.seen.get()
        tags, n = (list(cur[0]), cur[1]) if cur else ([], 0)
        for r in rows:
            tags += r["tags"] or []
            n += 1
        self.seen.update((tags, n))
        yield (key[0], tags, n)


def test_transform_with_state_keyed_by_a_struct_holds_nested_state(tmp_path):
    out_schema = "e STRUCT<user: STRING, n: INT>, tags ARRAY<STRING>, n BIGINT"
    got = _run(lambda s: s.group_by("e").transform_with_state(_TagsSeen(), out_schema), tmp_path, mode="update")
    assert got[1] == sorted([{"e": {"user": "a", "n": 1}, "tags": ["x", "x"], "n": 2},
                             {"e": {"user": None, "n": None}, "tags": ["x", "y"], "n": 2},
                             {"e": {"user": "b", "n": 0}, "tags": [], "n": 1}], key=repr)


def test_min_of_a_map_is_refused_like_spark():
    src = inc.read_stream.memory(SCHEMA)
    with pytest.raises(AnalysisException, match="INVALID_ORDERING_TYPE"):
        src.group_by("id").agg(F.min("m")).schema


def test_nested_dedup_keys_and_watermark_columns_are_refused_as_the_frame_is_built():
    src = inc.read_stream.memory("ts TIMESTAMP, e STRUCT<n: INT, at: TIMESTAMP>")
    with pytest.raises(AnalysisException, match="UNRESOLVED_COLUMN_AMONG_FIELD_NAMES"):
        src.drop_duplicates(["e.n"])
    with pytest.raises(AnalysisException, match="nested field"):
        src.with_watermark("e.at", "1 minute")

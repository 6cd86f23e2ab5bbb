"""Nested data and generator scenarios, shared by docs/spark/record_nested.py (PySpark) and
tests/operators/test_nested_spark_parity.py (increments): one JSON file per micro-batch; each
query is written the same way in both (SQL text in increments' select = Spark's selectExpr)."""
from __future__ import annotations


def T(hm: str) -> str:
    return f"2024-01-01T{hm}:00Z"


TAGS = "id STRING, ts TIMESTAMP, tags ARRAY<STRING>"
TAG_FILES = [
    [{"id": "a", "ts": T("10:01"), "tags": ["x", "y"]}, {"id": "b", "ts": T("10:04"), "tags": ["x"]}],
    # no elements: explode drops these rows below the watermark (they never move it), explode_outer keeps
    # them. (A row without the key at all is counted in Spark's num_input_rows although explode drops
    # it: its JSON scan never evaluates the pushed `tags IS NOT NULL` on an absent field; increments
    # counts it out, as an explicit null. README: differences.)
    [{"id": "c", "ts": T("10:40"), "tags": []}, {"id": "d", "ts": T("10:12"), "tags": ["y"]},
     {"id": "e", "ts": T("10:45"), "tags": None}, {"id": "e2", "ts": T("10:44"), "tags": []}],
    [{"id": "f", "ts": T("10:03"), "tags": ["x"]}, {"id": "g", "ts": T("10:31"), "tags": ["z", "z"]}],
    [{"id": "h", "ts": T("10:15"), "tags": ["y", "x"]}, {"id": "i", "ts": T("10:50"), "tags": ["x"]}],
    [{"id": "j", "ts": T("10:22"), "tags": ["q"]}, {"id": "k", "ts": T("11:20"), "tags": ["x"]}],
]

NESTED = ("ts TIMESTAMP, e STRUCT<user: STRUCT<id: STRING, country: STRING>, n: INT>, tags ARRAY<STRING>, "
          "attrs MAP<STRING, BIGINT>")
NESTED_FILES = [
    [{"ts": T("10:01"), "e": {"user": {"id": "u1", "country": "fr"}, "n": 1}, "tags": ["a", "b"], "attrs": {"k": 1}},
     {"ts": T("10:02"), "e": {"n": 2, "user": {"country": "de", "id": "u2"}}, "tags": ["c"], "attrs": {"k": 2, "j": 5}},
     {"ts": T("10:03"), "e": {}, "tags": ["d"], "attrs": {}}],
    [{"ts": T("10:05"), "e": None, "tags": None, "attrs": None},
     {"ts": T("10:06"), "e": {"user": {"id": "u1", "country": "fr"}, "n": 1}, "tags": ["a"], "attrs": {"K": 3}},
     {"ts": T("10:25"), "e": {"user": {"id": "u3", "country": "fr"}, "n": 7, "extra": 1}, "tags": ["e", "f"],
      "attrs": {"k": 9}}],
    [{"ts": T("10:04"), "e": {"user": {"id": "u1", "country": "fr"}, "n": 1}, "tags": ["z"], "attrs": {"k": 4}},
     {"ts": T("10:18"), "e": {"user": None, "n": None}, "tags": ["g"], "attrs": {"k": 5}},
     {"ts": T("10:41"), "e": {"user": {"id": "u2", "country": "de"}, "n": 2}, "tags": ["h", "i"], "attrs": {"j": 6}}],
    [{"ts": T("10:19"), "e": {"user": {"id": "u9"}, "n": 3}, "tags": ["late"], "attrs": {"k": 1}},
     {"ts": T("10:55"), "e": {"user": {"id": "u1", "country": "fr"}, "n": 1}, "tags": ["a", "b", "c"], "attrs": {"k": 1}}],
]

SHORT_FILES = [
    [{"ts": T("10:01"), "e": {"n": 1}, "tags": ["a", "b"], "attrs": {"k": 1}}],
    [{"ts": T("10:02"), "e": {"n": 2}, "tags": ["c"], "attrs": {"k": 2}}],   # tags[1] is out of range
    [{"ts": T("10:03"), "e": {"n": 3}, "tags": ["d", "e"], "attrs": {"k": 3}}],
]

WM = ("ts", "10 minutes")

SCENARIOS = {
    "explode_window": {"sources": {"a": (TAGS, WM, TAG_FILES)}},
    "explode_outer_window": {"sources": {"a": (TAGS, WM, TAG_FILES)}},
    "posexplode_window_update": {"sources": {"a": (TAGS, WM, TAG_FILES)}, "output_mode": "update"},
    "explode_dedup": {"sources": {"a": (TAGS, WM, TAG_FILES)}},
    "posexplode_stateless": {"sources": {"a": (TAGS, WM, TAG_FILES)}},
    "posexplode_outer_stateless": {"sources": {"a": (TAGS, None, TAG_FILES)}},
    "explode_map_stateless": {"sources": {"a": (NESTED, None, NESTED_FILES)}},
    "nested_select_filter": {"sources": {"a": (NESTED, WM, NESTED_FILES)}},
    "struct_key_window": {"sources": {"a": (NESTED, WM, NESTED_FILES)}},
    "struct_key_window_update": {"sources": {"a": (NESTED, WM, NESTED_FILES)}, "output_mode": "update"},
    "nested_field_keys_update": {"sources": {"a": (NESTED, WM, NESTED_FILES)}, "output_mode": "update"},
    "struct_dedup": {"sources": {"a": (NESTED, WM, NESTED_FILES)}},
    "list_key_complete": {"sources": {"a": (NESTED, None, NESTED_FILES)}, "output_mode": "complete"},
    "map_value_key_update": {"sources": {"a": (NESTED, WM, NESTED_FILES)}, "output_mode": "update"},
    "explode_map_window": {"sources": {"a": (NESTED, WM, NESTED_FILES)}},
    "index_out_of_range": {"sources": {"a": (NESTED, None, SHORT_FILES)}},
    "map_key_complete": {"sources": {"a": (NESTED, None, NESTED_FILES)}, "output_mode": "complete"},
    "nested_dedup_key": {"sources": {"a": (NESTED, WM, NESTED_FILES)}},
    "struct_key_session": {"sources": {"a": (NESTED, WM, NESTED_FILES)}},
    "explode_outer_map_dedup": {"sources": {"a": (NESTED, WM, NESTED_FILES)}},
    "posexplode_map_window_update": {"sources": {"a": (NESTED, WM, NESTED_FILES)}, "output_mode": "update"},
}

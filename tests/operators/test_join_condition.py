"""Join conditions are read by DuckDB's parser (operators/join_condition.py on increments/sql_tree.py),
not by patterns over the text: string literals, quoted names, comments, parentheses and spelling
change nothing; what the join records (its key texts, in the checkpoint's state schema) is cut out
of the condition exactly as written."""
from __future__ import annotations

import pyarrow as pa
import pytest

import increments as inc
from increments.operators.join_condition import Side, analyse, not_null_columns, split_conjuncts
from increments.operators.join_outputs import qualify_sql
from join_testutil import COND, INNER, check_scenario_metrics, pairs, run, scenario_sources

TS = pa.timestamp("us", tz="UTC")
IMPS = Side(pa.schema([("imp_id", pa.string()), ("ad_id", pa.int64()), ("imp_time", TS), ("a b", pa.int64())]),
            "i", {"imp_time": (0, 600_000)})
CLICKS = Side(pa.schema([("click_id", pa.string()), ("ad_id", pa.int64()), ("click_time", TS)]),
              "c", {"click_time": (1, 600_000)})

# The scenario's condition, spelt otherwise: parentheses, lower case, a comment, a string literal that
# holds " AND ", "=" and column names (a conjunct of its own, true for every click).
COND_SPELT = ("(c.ad_id = i.ad_id) -- the key\n"
              "and c.click_id <> 'i.ad_id = c.ad_id AND c.click_time > i.imp_time' "
              "AND (c.click_time between i.imp_time and i.imp_time + interval 1 hour)")


@pytest.mark.parametrize("cond", [COND, COND_SPELT], ids=["plain", "spelt"])
def test_the_scenario_is_the_same_however_the_condition_is_spelt(tmp_path, cond):
    imps, clicks = scenario_sources(tmp_path)
    batches, progress = run(imps.join(clicks, cond, "inner").select("i.imp_id", "c.click_id"), tmp_path)
    assert pairs(batches) == INNER
    check_scenario_metrics(progress)          # same watermarks, state rows (the time bound was found), late rows


def test_key_texts_and_bounds_are_cut_from_the_condition_as_written():
    spec = analyse("(i.ad_id) = c.ad_id AND c.click_time BETWEEN i.imp_time AND i.imp_time + INTERVAL 1 HOUR",
                   "inner", IMPS, CLICKS)
    assert (spec.left_keys, spec.right_keys) == (["(i.ad_id)"], ["c.ad_id"])   # recorded in the state schema
    # Spark's state watermarks for the bound: imps <= W - 1h - 1ms, clicks <= W - 1ms
    assert spec.state_offsets == {"left": ("imp_time", -3_600_001), "right": ("click_time", -1)}
    assert spec.other_terms == ["c.click_time BETWEEN i.imp_time AND i.imp_time + INTERVAL 1 HOUR"]
    # the sides are read from the tree: written the other way round, the keys are still (left, right)
    spec = analyse("c.ad_id   =   i.ad_id", "inner", IMPS, CLICKS)
    assert (spec.left_keys, spec.right_keys) == (["i.ad_id"], ["c.ad_id"])


def test_literals_and_comments_are_no_conjunctions_comparisons_or_keys():
    cond = "i.ad_id = c.ad_id AND c.click_id = 'x AND i.ad_id = c.ad_id' /* AND i.imp_id = c.click_id */"
    assert split_conjuncts(cond) == ["i.ad_id = c.ad_id", "c.click_id = 'x AND i.ad_id = c.ad_id'"]
    spec = analyse(cond, "inner", IMPS, CLICKS, require_equality=False)
    assert (spec.left_keys, spec.right_keys) == (["i.ad_id"], ["c.ad_id"])
    # a top-level OR keeps the condition one term; NOT BETWEEN is no bound
    assert split_conjuncts("i.ad_id = c.ad_id OR i.imp_id = c.click_id") == ["i.ad_id = c.ad_id OR i.imp_id = c.click_id"]
    spec = analyse("i.ad_id = c.ad_id AND c.click_time NOT BETWEEN i.imp_time AND i.imp_time + INTERVAL 1 HOUR",
                   "inner", IMPS, CLICKS)
    assert spec.state_offsets == {}


def test_not_null_columns_are_the_compared_column_references():
    # Spark infers IS NOT NULL for the columns a comparison reads: a quoted name is one, a string
    # literal spelling a column's name is none
    cond = "i.ad_id = c.ad_id AND i.\"a b\" > 0 AND c.click_id <> 'i.imp_id'"
    assert not_null_columns(cond, IMPS, CLICKS) == ["ad_id", "a b"]
    assert not_null_columns(cond, CLICKS, IMPS) == ["ad_id", "click_id"]


def test_qualified_references_are_rewritten_outside_literals_quoted_names_and_comments():
    quals = {"i": {"imp_id": "imp_id", "ad_id": "i.ad_id"}}
    assert (qualify_sql("i.ad_id || 'i.ad_id' || \"i.ad_id\" -- i.ad_id", quals)
            == "\"i.ad_id\" || 'i.ad_id' || \"i.ad_id\" -- i.ad_id")
    assert qualify_sql("i.ad_id", quals, as_select=True) == "\"i.ad_id\" AS \"ad_id\""
    assert qualify_sql("i.*", quals, as_select=True) == "\"imp_id\" AS \"imp_id\", \"i.ad_id\" AS \"ad_id\""


def test_a_string_literal_naming_a_qualified_column_stays_a_literal(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    q = imps.join(clicks, COND).select("i.imp_id", "'i.ad_id' AS label", "c.ad_id")
    batches, _ = run(q, tmp_path)
    assert batches[0] == [{"imp_id": "i1", "label": "i.ad_id", "ad_id": 1}]


def test_a_condition_duckdb_cannot_parse_is_refused_naming_why(tmp_path):
    imps, clicks = scenario_sources(tmp_path)
    with pytest.raises(inc.AnalysisException, match=r"not SQL DuckDB can parse \(syntax error"):
        run(imps.join(clicks, "c.ad_id = = i.ad_id"), tmp_path)

"""write_stream.apply_changes(...): AUTO CDC into real Delta tables and PostgreSQL, checked against
Databricks' documented results and against the documented rule applied to the whole change set
(cdc_testutil.model_*), for hand-made out-of-order change sets and generated ones."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import increments as inc
from cdc_testutil import (DOCS, DOCS_SCD1, DOCS_SCD2, DOCS_SCD2_EXCEPT_CITY, Target, ev, model_scd1, model_scd2,
                          run_batches)

KINDS = ["delta", "postgres"]


@pytest.fixture(params=KINDS)
def target(request, tmp_path):
    pg = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    return Target(request.param, tmp_path, pg)


def test_documented_example_scd1(tmp_path, target):
    run_batches(tmp_path, target, [DOCS], scd=1)
    assert target.rows(1) == DOCS_SCD1 == model_scd1(DOCS)


def test_documented_example_scd2(tmp_path, target):
    run_batches(tmp_path, target, [DOCS], scd=2)
    assert target.rows(2) == sorted(DOCS_SCD2, key=repr) == model_scd2(DOCS)


def test_documented_example_track_history_except(tmp_path, target):
    run_batches(tmp_path, target, [DOCS], scd=2, track_history_except_columns=["city"])
    assert target.rows(2) == sorted(DOCS_SCD2_EXCEPT_CITY, key=repr) == model_scd2(DOCS, tracked=("name",))


@pytest.mark.parametrize("scd", [1, 2])
def test_out_of_order_over_batches_gives_the_same_table(tmp_path, target, scd):
    """The documented change set, newest first, one change per batch: each batch applies what it
    can; the end result is the documented table (older changes arriving later are ignored (1) or
    fill in history (2))."""
    batches = [[e] for e in sorted(DOCS, key=lambda e: -e["seq"])]
    q = run_batches(tmp_path, target, batches, scd=scd)
    assert target.rows(scd) == (DOCS_SCD1 if scd == 1 else sorted(DOCS_SCD2, key=repr))
    if scd == 1:
        ignored = sum(p["state_operators"][0]["num_ignored_changes"] for p in q.recent_progress)
        assert ignored == 4      # 125 at 5 and 2 after its 6; 123 at 5 and 1 after its delete at 6


@pytest.mark.parametrize("scd", [1, 2])
def test_delete_before_insert_leaves_a_tombstone(tmp_path, target, scd):
    batches = [[ev(7, None, None, "DELETE", 10)], [ev(7, "Ana", "Lima", "INSERT", 3)],
               [ev(7, "Ana", "Quito", "UPDATE", 12)]]
    q = run_batches(tmp_path, target, batches[:2], scd=scd)
    assert target.rows(scd) == ([] if scd == 1 else [(7, "Ana", "Lima", 3, 10)])
    assert q.last_progress["state_operators"][0]["num_tombstones"] == (1 if scd == 1 else 0)
    run_batches(tmp_path, target, batches, scd=scd)       # a newer insert after the delete applies
    assert target.rows(scd) == ([(7, "Ana", "Quito")] if scd == 1 else [(7, "Ana", "Lima", 3, 10),
                                                                         (7, "Ana", "Quito", 12, None)])


@pytest.mark.parametrize("scd", [1, 2])
def test_tombstones_expire_after_the_retention(tmp_path, scd, pg_url):
    """Past tombstone_retention (of processing time) an older insert for the deleted key applies."""
    target = Target("delta", tmp_path)
    src = inc.read_stream.memory("id BIGINT, name STRING, city STRING, op STRING, seq BIGINT")
    q = target.start(src.write_stream.apply_changes(
        ["id"], "seq", "op = 'DELETE'", ["op", "seq"], scd, tombstone_retention="1 second")
        .checkpoint_location(str(tmp_path / "chk")))
    src.add_data([ev(8, None, None, "DELETE", 10)])
    q.process_all_available()
    time.sleep(1.5)
    src.add_data([ev(9, "Bo", "Oslo", "INSERT", 1)])          # a later batch: the tombstone expires
    q.process_all_available()
    src.add_data([ev(8, "Cy", "Rome", "INSERT", 2)])
    q.process_all_available()
    q.stop()
    ops = [p["state_operators"][0] for p in q.recent_progress]
    assert [o["num_tombstones_expired"] for o in ops] == [0, 1, 0]
    want = [(8, "Cy", "Rome"), (9, "Bo", "Oslo")] if scd == 1 else [(8, "Cy", "Rome", 2, None),
                                                                     (9, "Bo", "Oslo", 1, None)]
    assert target.rows(scd) == want


@pytest.mark.parametrize("scd", [1, 2])
def test_duplicates_and_null_keys(tmp_path, target, scd):
    """A NULL key is a key of its own, matched null-safely; a duplicate change (same key, same
    sequence, same row) is a no-op within a batch and across batches."""
    b1 = [ev(None, "Nil", "A", "INSERT", 1), ev(None, "Nil", "A", "INSERT", 1), ev(1, "One", "A", "INSERT", 1)]
    b2 = [ev(None, "Nil", "B", "UPDATE", 2), ev(1, "One", "A", "INSERT", 1), ev(None, "Nil", "B", "UPDATE", 2)]
    b3 = [ev(None, None, None, "DELETE", 3)]
    run_batches(tmp_path, target, [b1, b2], scd=scd)
    want = model_scd1(b1 + b2) if scd == 1 else model_scd2(b1 + b2)
    assert target.rows(scd) == want
    assert want == ([(1, "One", "A"), (None, "Nil", "B")] if scd == 1 else
                    [(1, "One", "A", 1, None), (None, "Nil", "A", 1, 2), (None, "Nil", "B", 2, None)])
    run_batches(tmp_path, target, [b1, b2, b3], scd=scd)
    assert target.rows(scd) == (model_scd1(b1 + b2 + b3) if scd == 1 else model_scd2(b1 + b2 + b3))


def test_a_delete_and_an_upsert_at_one_sequence_the_delete_wins(tmp_path, target):
    for order in ([ev(3, "X", "Y", "UPDATE", 5), ev(3, None, None, "DELETE", 5)],
                  [ev(3, None, None, "DELETE", 5), ev(3, "X", "Y", "UPDATE", 5)]):
        t = Target(target.kind, tmp_path, target.pg_url)
        run_batches(tmp_path, t, [[ev(3, "A", "B", "INSERT", 1)], order[:1], order[1:]], scd=2)
        assert t.rows(2) == [(3, "A", "B", 1, 5)]


def test_late_change_bisects_history(tmp_path, target):
    """Spark's documented run example (trackHistory on name): Alice at 5, 10, 15, Charlie at 20;
    Bob arriving late at 12 splits the Alice run: Alice [5,12) holds the values of 10, Bob
    [12,15), Alice again from 15, Charlie from 20."""
    def e(seq, name, city):
        return ev(1, name, city, "UPDATE", seq)
    first = [e(5, "Alice", "c5"), e(10, "Alice", "c10"), e(15, "Alice", "c15"), e(20, "Charlie", "c20")]
    run_batches(tmp_path, target, [first, [e(12, "Bob", "c12")]], scd=2, track_history_columns=["name"])
    assert target.rows(2) == [(1, "Alice", "c10", 5, 12), (1, "Alice", "c15", 15, 20), (1, "Bob", "c12", 12, 15),
                              (1, "Charlie", "c20", 20, None)]


def test_sequence_by_several_columns_and_except(tmp_path):
    """sequence_by=["seq", "minor"] orders by seq, then minor; columns kept but for except."""
    t = Target("delta", tmp_path)
    src = inc.read_stream.memory("id BIGINT, name STRING, city STRING, op STRING, seq BIGINT, minor BIGINT")
    q = t.start(src.write_stream.apply_changes(["id"], ["seq", "minor"], "op = 'DELETE'", ["op"])
                .checkpoint_location(str(tmp_path / "chk")))
    src.add_data([{**ev(1, "b", "x", "U", 1), "minor": 2}, {**ev(1, "a", "x", "U", 1), "minor": 1}])
    q.process_all_available()
    src.add_data([{**ev(1, "c", "x", "U", 1), "minor": 0}])
    q.process_all_available()
    q.stop()
    assert t.rows(1, ("id", "name", "seq")) == [(1, "b", 1)]


def test_null_sequence_fails_the_batch_naming_the_row(tmp_path):
    with pytest.raises(inc.StreamingQueryException) as e:
        run_batches(tmp_path, Target("delta", tmp_path), [[ev(1, "a", "b", "INSERT", None)]])
    assert "NULL sequence" in str(e.value) and "'id': 1" in str(e.value)


def test_refusals_before_any_batch(tmp_path):
    src = inc.read_stream.memory("id BIGINT, name STRING, op STRING, seq BIGINT")
    chk = str(tmp_path / "chk")
    cases = [
        (dict(keys=["nope"], sequence_by="seq"), "keys ['nope'] not among"),
        (dict(keys=["id"], sequence_by="seq", except_columns=["id"]), "keys ['id'] must be target columns"),
        (dict(keys=["id"], sequence_by="seq", apply_as_deletes="seq + 1"), "not a boolean"),
        (dict(keys=["id"], sequence_by="name", stored_as_scd_type=1, track_history_columns=["name"]),
         "need stored_as_scd_type=2"),
    ]
    for kw, msg in cases:
        with pytest.raises((inc.AnalysisException, ValueError), match=msg.replace("[", r"\[").replace("]", r"\]")):
            src.write_stream.apply_changes(**kw).format("delta").checkpoint_location(chk).start(str(tmp_path / "t"))
    with pytest.raises(inc.AnalysisException, match="format\\('delta'\\) or format\\('postgres'\\)"):
        src.write_stream.apply_changes(["id"], "seq").format("parquet").checkpoint_location(chk).start(
            str(tmp_path / "p"))
    with pytest.raises(inc.AnalysisException, match="output_mode 'update'"):
        (src.write_stream.apply_changes(["id"], "seq").format("delta").output_mode("update")
         .checkpoint_location(chk).start(str(tmp_path / "t")))


def test_restart_keeps_the_sequencing_state(tmp_path, target):
    """Two runs on one checkpoint (a file source, one file per batch): the second run's late
    changes are sequenced against the state the first one committed."""
    import json
    import os
    src_dir = tmp_path / "in"
    os.makedirs(src_dir)

    def run(files):
        for i, rows in files:
            (src_dir / f"part-{i}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        frame = inc.read_stream.files(str(src_dir), "json", "id BIGINT, name STRING, city STRING, op STRING, "
                                      "seq BIGINT", max_files_per_trigger=1)
        w = (frame.write_stream.apply_changes(["id"], "seq", "op = 'DELETE'", ["op", "seq"], 2)
             .checkpoint_location(str(tmp_path / "chk")).trigger(available_now=True))
        target.start(w).await_termination()
    run([(0, DOCS[:4])])
    run([(1, list(reversed(DOCS[4:6]))), (2, DOCS[6:])])
    assert target.rows(2) == sorted(DOCS_SCD2, key=repr)


# -- generated change sets: any order, any batching, the documented table -----------------------------
@st.composite
def change_sets(draw):
    events = []
    for key in draw(st.lists(st.sampled_from([None, 1, 2, 3]), min_size=1, max_size=4, unique=True)):
        seqs = draw(st.lists(st.integers(1, 30), min_size=1, max_size=6, unique=True))
        for s in seqs:
            op = draw(st.sampled_from(["INSERT", "UPDATE", "DELETE"]))
            name = None if op == "DELETE" else draw(st.sampled_from(["a", "b"]))
            city = None if op == "DELETE" else draw(st.sampled_from(["x", "y"]))
            events.append(ev(key, name, city, op, s))
            if draw(st.booleans()) and op != "DELETE":
                events.append(dict(events[-1]))                              # an exact duplicate
    order = draw(st.permutations(events))
    cuts = sorted(draw(st.lists(st.integers(0, len(order)), max_size=3)))
    bounds = [0] + cuts + [len(order)]
    return events, [list(order[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


@pytest.mark.parametrize("scd", [1, 2])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=change_sets())
def test_any_arrival_order_and_batching_gives_the_documented_table(tmp_path, scd, case):
    events, batches = case
    t = Target("delta", tmp_path)
    run_batches(tmp_path, t, batches, scd=scd)
    assert t.rows(scd) == (model_scd1(events) if scd == 1 else model_scd2(events))


def test_the_sequencing_state_reads_as_a_table(tmp_path):
    """inc.read_state: type 1 keeps one row per key (its last sequence, kind, a tombstone's time);
    type 2 every applied change of a key."""
    for scd, want in [(1, {(123, 6, "D"), (124, 1, "U"), (125, 6, "U"), (126, 2, "U")}),
                      (2, {(e["id"], e["seq"], "D" if e["op"] == "DELETE" else "U") for e in DOCS})]:
        chk = str(tmp_path / f"chk{scd}")
        run_batches(tmp_path, Target("delta", tmp_path), [DOCS], scd=scd, chk=chk)
        rows = inc.read_state(chk, 0).to_pylist()
        assert {(r["id"], r["seq"], r["__kind"]) for r in rows} == want
        assert all((r["__created_ms"] is not None) == (r["__kind"] == "D" or scd == 2) for r in rows)

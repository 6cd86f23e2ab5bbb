"""`increments repartition`: a stopped query's state rewritten from 2 into 3 (or 1) partitions;
the query resumes with the new count and its output, batch by batch, equals a run that was never
rescaled (windowed aggregation, dedup with the event time in its key, dedup within watermark with
its side index, stream-stream join; RocksDB and memory state). The commit row of the last batch
names the new tokens and records the change; starting with the old count fails."""
from __future__ import annotations

import datetime as dt
import json
import os

import pytest

import increments as inc
from increments import functions as F
from increments.checkpoint.repartition import repartition
from increments.errors import AnalysisException, IncompatibleCheckpointError

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _ts(minutes: float) -> str:
    return (T0 + dt.timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def _write(d: str, files: range, rows) -> None:
    os.makedirs(d, exist_ok=True)
    for f in files:
        with open(os.path.join(d, f"part-{f:03d}.json"), "w") as out:
            for r in rows(f):
                out.write(json.dumps(r) + "\n")


def _click(f: int, i: int) -> dict:
    return {"campaign_id": f"c{(i * 7 + f) % 11}", "user_id": f"u{(i * 3 + f) % 13}", "ad_id": (i * 5 + f) % 17,
            "event_time": _ts(f * 9 + i * 0.5)}


def _clicks(f: int):
    """25 clicks, then the previous file's last 6 again (duplicates across files and phases)."""
    return [_click(f, i) for i in range(25)] + ([_click(f - 1, i) for i in range(19, 25)] if f else [])


def _imps(f: int):
    return [{"imp_id": f"i{f}-{i}", "ad_id": (i * 5 + f) % 17, "imp_time": _ts(f * 9 + i * 0.5 - 3)} for i in range(20)]


def _frame(root: str, kind: str):
    clicks = inc.read_stream.files(os.path.join(root, "clicks"), "json",
                                   "campaign_id STRING, user_id STRING, ad_id BIGINT, event_time TIMESTAMP",
                                   max_files_per_trigger=1).with_watermark("event_time", "5 minutes")
    if kind == "window":
        return clicks.group_by(F.window("event_time", "10 minutes"), "campaign_id").count()
    if kind == "dedup":
        return clicks.drop_duplicates(["user_id", "event_time"]).select("user_id", "event_time")
    if kind == "dedup_within":
        return clicks.drop_duplicates_within_watermark(["user_id"]).select("user_id", "event_time")
    if kind == "join":
        imps = inc.read_stream.files(os.path.join(root, "imps"), "json", "imp_id STRING, ad_id BIGINT, imp_time TIMESTAMP",
                                     max_files_per_trigger=1).with_watermark("imp_time", "5 minutes")
        cond = "c.ad_id = i.ad_id AND c.event_time BETWEEN i.imp_time AND i.imp_time + INTERVAL 10 MINUTES"
        return imps.alias("i").join(clicks.alias("c"), cond).select("i.imp_id", "c.user_id", "c.event_time")
    raise ValueError(kind)


def _run(root: str, chk: str, kind: str, partitions: int, store: str, out: dict) -> None:
    def collect(table, batch_id):
        out[batch_id] = sorted(json.dumps(r, default=str, sort_keys=True) for r in table.to_pylist())
    w = (_frame(root, kind).write_stream.foreach_batch(collect).output_mode("append").checkpoint_location(chk)
         .query_name(f"rescale_{kind}").option("state_partitions", partitions).option("state_store", store)
         .trigger(available_now=True))
    w.start().await_termination()


def _scenario(root: str, kind: str, store: str, rescale_to: int | None) -> dict:
    out: dict = {}
    chk = os.path.join(root, "chk")
    _write(os.path.join(root, "clicks"), range(0, 3), _clicks)
    _write(os.path.join(root, "imps"), range(0, 3), _imps)
    _run(root, chk, kind, 2, store, out)
    first = len(out)
    if rescale_to is not None:
        res = repartition(chk, rescale_to)
        assert (res["from"], res["to"], res["batch_id"]) == (2, rescale_to, first - 1)
        assert res["stores"] and all(n > 0 for n in res["stores"].values()), res
    _write(os.path.join(root, "clicks"), range(3, 6), _clicks)
    _write(os.path.join(root, "imps"), range(3, 6), _imps)
    _run(root, chk, kind, rescale_to or 2, store, out)
    assert len(out) > first
    return out


@pytest.mark.parametrize("kind,store,to", [("window", "rocksdb", 3), ("window", "memory", 1), ("dedup", "rocksdb", 3),
                                           ("dedup_within", "memory", 3), ("join", "rocksdb", 3), ("join", "memory", 1)])
def test_rescaled_query_resumes_with_output_of_an_unrescaled_run(tmp_path, kind, store, to):
    expected = _scenario(str(tmp_path / "ref"), kind, store, None)
    got = _scenario(str(tmp_path / "rescaled"), kind, store, to)
    assert got == expected
    assert any(rows for rows in expected.values())


def test_the_commit_row_records_the_change_and_the_old_count_is_refused(tmp_path):
    root = str(tmp_path)
    out: dict = {}
    chk = os.path.join(root, "chk")
    _write(os.path.join(root, "clicks"), range(0, 2), _clicks)
    _run(root, chk, "window", 2, "rocksdb", out)
    q = _frame(root, "window").write_stream.foreach_batch(lambda t, b: None).output_mode("append") \
        .checkpoint_location(chk).query_name("rescale_window").option("state_partitions", 3)
    with pytest.raises(IncompatibleCheckpointError, match=r"state_partitions.*`increments repartition .* --partitions 3`"):
        q.build().close()
    repartition(chk, 3)
    rt = q.build()
    try:
        c = rt.log.latest_commit()
        assert c.extra["repartition"]["from"] == 2 and c.extra["repartition"]["to"] == 3
        assert all(len(ts) == 3 for ts in c.extra["state_tokens"].values())
        assert all(len(ts) == 2 for ts in c.extra["repartition"]["previous_state_tokens"].values())
    finally:
        rt.close()
    with pytest.raises(IncompatibleCheckpointError, match="state_partitions"):
        q.option("state_partitions", 2).build().close()
    assert repartition(chk, 3)["to"] == 3                      # again: nothing left to do


def test_command_line(tmp_path, capsys):
    from increments.cli import main
    root = str(tmp_path)
    _write(os.path.join(root, "clicks"), range(0, 2), _clicks)
    chk = os.path.join(root, "chk")
    _run(root, chk, "dedup_within", 2, "rocksdb", {})
    assert main(["repartition", chk, "--partitions", "4"]) == 0
    out = capsys.readouterr().out
    assert "state partitions 2 -> 4" in out and 'option("state_partitions", 4)' in out and "-byexpiry" in out
    with pytest.raises(SystemExit, match="not a query checkpoint"):
        main(["repartition", str(tmp_path / "nothing"), "--partitions", "2"])


def test_repartition_refuses_a_planned_uncommitted_batch(tmp_path):
    from increments.execution import steps
    root = str(tmp_path)
    _write(os.path.join(root, "clicks"), range(0, 2), _clicks)
    chk = os.path.join(root, "chk")
    rt = _frame(root, "window").write_stream.foreach_batch(lambda t, b: None).output_mode("append") \
        .checkpoint_location(chk).query_name("rescale_window").option("state_partitions", 2).build()
    try:
        assert steps.plan_batch(rt) is not None
    finally:
        rt.close()
    with pytest.raises(AnalysisException, match="planned but not committed"):
        repartition(chk, 3)


def _unsigned_counts(root: str, chk: str, key_type: str, partitions: int, files: range, out: dict) -> None:
    """clicks grouped by ad_id cast to an unsigned type (a UINT* key in the state schema), update mode."""
    _write(os.path.join(root, "clicks"), files, _clicks)
    frame = (inc.read_stream.files(os.path.join(root, "clicks"), "json",
                                   "campaign_id STRING, user_id STRING, ad_id BIGINT, event_time TIMESTAMP",
                                   max_files_per_trigger=1)
             .with_column("ad", f"CAST(ad_id AS {key_type})").group_by("ad", "campaign_id").count())
    (frame.write_stream.foreach_batch(lambda t, b: out.__setitem__(b, sorted(map(str, t.to_pylist()))))
     .output_mode("update").checkpoint_location(chk).query_name("rescale_unsigned")
     .option("state_partitions", partitions).trigger(available_now=True).start().await_termination())


def _state_rows(chk: str) -> list:
    return sorted(inc.read_state(chk).to_pylist(), key=lambda r: (r["ad"], r["campaign_id"]))


@pytest.mark.parametrize("key_type", ["UBIGINT", "UINTEGER", "USMALLINT", "DECIMAL(12, 2)"])
def test_unsigned_grouping_key_is_repartitioned(tmp_path, key_type):
    """An unsigned key column is recorded as UINT64/UINT32/UINT16 in the state schema, a decimal one as
    DECIMAL128(12, 2) (repartition used to crash on those names; a decimal key could not be kept in state): after repartitioning 2 -> 3, every key's state (counts and partition) is
    the one of a query that ran with 3 partitions from the start, and so is the resumed output."""
    got, ref = {}, {}
    chk, ref_chk = str(tmp_path / "chk"), str(tmp_path / "ref_chk")
    _unsigned_counts(str(tmp_path / "a"), chk, key_type, 2, range(0, 3), got)
    _unsigned_counts(str(tmp_path / "b"), ref_chk, key_type, 3, range(0, 3), ref)
    before = _state_rows(chk)
    assert repartition(chk, 3)["stores"] == {"0": len(before)}
    after = _state_rows(chk)
    assert [{k: v for k, v in r.items() if k != "_partition"} for r in after] == \
        [{k: v for k, v in r.items() if k != "_partition"} for r in before]
    assert after == _state_rows(ref_chk)
    assert {r["_partition"] for r in after} == {0, 1, 2}
    _unsigned_counts(str(tmp_path / "a"), chk, key_type, 3, range(3, 5), got)
    _unsigned_counts(str(tmp_path / "b"), ref_chk, key_type, 3, range(3, 5), ref)
    assert got == ref and len(got) == 5


def test_a_key_type_repartition_cannot_read_back_is_refused_by_name():
    from increments.checkpoint.repartition import _partitioner
    from state.encoding import encode_key
    assign = _partitioner("0", "stateStoreSave", {"key": [["k", "TIME64[US]"]]}, "")
    with pytest.raises(AnalysisException, match=r"state store 0: key column 'k' has type 'TIME64\[US\]'.*"
                                                r"the state was not changed"):
        assign([encode_key((1,))], 3)


@pytest.mark.parametrize("scd", [1, 2])
def test_rescaled_apply_changes_resumes_with_the_same_table(tmp_path, scd):
    """AUTO CDC state (sequences, tombstones, type 2's changes per key) rehashed by key: late
    changes after the rescale are sequenced against it as without the rescale."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "operators"))
    from cdc_testutil import DOCS, DOCS_SCD1, DOCS_SCD2, ev
    from increments.sinks.delta import read_table
    first = DOCS[:4] + [ev(9, None, None, "DELETE", 5)]
    later = list(reversed(DOCS[4:])) + [ev(9, "Zed", "Oslo", "INSERT", 2)]

    def scenario(root: str, to: int | None) -> list:
        chk, table = os.path.join(root, "chk"), os.path.join(root, "t")

        def run(files, partitions):
            _write(os.path.join(root, "in"), files, lambda f: first if f == 0 else later)
            (inc.read_stream.files(os.path.join(root, "in"), "json", "id BIGINT, name STRING, city STRING, op STRING, "
                                   "seq BIGINT", max_files_per_trigger=1)
             .write_stream.apply_changes(["id"], "seq", "op = 'DELETE'", ["op", "seq"], scd)
             .format("delta").checkpoint_location(chk).option("state_partitions", partitions)
             .trigger(available_now=True).start(table).await_termination())
        run(range(0, 1), 2)
        if to is not None:
            res = repartition(chk, to)
            assert res["stores"], res
        run(range(1, 2), to or 2)
        t, _ = read_table(table)
        return sorted((tuple(r.values()) for r in t.to_pylist()), key=repr)
    got = scenario(str(tmp_path / "rescaled"), 3)
    assert got == scenario(str(tmp_path / "ref"), None)
    want = DOCS_SCD1 if scd == 1 else DOCS_SCD2 + [(9, "Zed", "Oslo", 2, 5)]     # the tombstone held
    assert got == sorted(want, key=repr)

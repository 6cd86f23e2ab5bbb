"""The fence comes first: a runner that no longer owns offsets[N] can neither process, write nor
commit batch N, and nothing it wrote before or after losing the fence is read by the winner
(state versions are named by tokens; commits[N] names the winner's).

Two runners of one stateful query share a checkpoint in one process (each with its own local
cache directory, as two machines would), and their steps are interleaved by hand, so the order is
exact (no timing). Runner A's query filters its input differently: any of A's state that leaked
into B's batches would change B's totals.
"""
from __future__ import annotations

import json

import pytest

import increments as inc
from increments.errors import ConcurrentRunError
from increments.execution import steps


def _inputs(d):
    d.mkdir()
    rows = []
    for f in range(4):
        lines = [{"k": f"k{i % 3}", "v": f * 100 + i} for i in range(6)]
        rows += lines
        (d / f"f{f}.json").write_text("".join(json.dumps(r) + "\n" for r in lines))
    totals = {}
    for r in rows:
        totals[r["k"]] = totals.get(r["k"], 0) + 1
    return totals


def _runtime(d, chk, local_dir, out, state_store, only_big=False):
    frame = inc.read_stream.files(str(d), "json", "k STRING, v BIGINT", max_files_per_trigger=1)
    if only_big:
        frame = frame.filter("v > 250")

    def collect(table, batch_id):
        out[batch_id] = {r["k"]: r["count"] for r in table.to_pylist()}
    w = (frame.group_by("k").count().write_stream.output_mode("complete").foreach_batch(collect)
         .checkpoint_location(str(chk)).query_name("fenced").option("state_store", state_store)
         .option("state_partitions", 2).option("local_dir", str(local_dir)))
    return w.build()


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_loser_is_refused_and_its_state_is_never_read(tmp_path, state_store):
    totals = _inputs(tmp_path / "in")
    out_a, out_b = {}, {}
    a = _runtime(tmp_path / "in", tmp_path / "chk", tmp_path / "cache_a", out_a, state_store, only_big=True)
    b = _runtime(tmp_path / "in", tmp_path / "chk", tmp_path / "cache_b", out_b, state_store)
    try:
        plan_a = steps.plan_batch(a)
        assert plan_a.batch_id == 0 and not plan_a.redo
        steps.read_batch(a, plan_a)
        steps.process_batch(a, plan_a)       # A owned batch 0: its state version 0 is committed (A's token)
        tokens_a = a.staging.get_json(0, "process")["state_tokens"]
        plan_b = steps.plan_batch(b)         # B takes over the uncommitted batch 0 (a crash redo)
        assert plan_b.batch_id == 0 and plan_b.redo and plan_b.entry.owner == b.run_id
        for step in (steps.process_batch, steps.write_batch, steps.commit_batch):
            with pytest.raises(ConcurrentRunError, match="Start only one runner|owned by|taken over"):
                step(a, plan_a)
        assert out_a == {}
        steps.read_batch(b, plan_b)
        steps.process_batch(b, plan_b)
        steps.write_batch(b, plan_b)
        steps.commit_batch(b, plan_b)
        # a zombie A that passed the fence just before losing it commits its version 0 late:
        # under its own token, which no commit row names
        a.state.begin(0, {})
        for s in a.state.stores_for("0", 0):
            s.put(b"junk", b"junk")
        a.state.commit_all(0)
        late_a = a.state.tokens()
        a.state.release()
        committed = b.log.get_commit(0).extra["state_tokens"]
        assert set(committed) == {"0"} and len(committed["0"]) == 2
        assert committed["0"] != late_a["0"]
        assert committed["0"] != tokens_a["0"]
        with pytest.raises(ConcurrentRunError):
            steps.process_batch(a, plan_a)
        while steps.run_one_batch(b) is not None:
            pass
    finally:
        a.close()
        b.close()
    assert out_b[max(out_b)] == totals
    assert max(out_b) == 3
    # the state reader follows the log to the winner's files too
    state = inc.read_state(str(tmp_path / "chk"), "0")
    assert state.num_rows == len(totals)


@pytest.mark.parametrize("state_store", ["rocksdb", "memory"])
def test_a_runner_planning_from_its_own_last_commit_still_meets_the_fence(tmp_path, state_store):
    """A runner plans batch N+1 from the commit it wrote itself (no read of the log). If another
    runner ran batches meanwhile, its write-ahead insert of offsets[N+1] fails and it stops before
    reading anything; the other runner's batches are untouched and the totals count each row once."""
    totals = _inputs(tmp_path / "in")
    out_a, out_b = {}, {}
    a = _runtime(tmp_path / "in", tmp_path / "chk", tmp_path / "cache_a", out_a, state_store)
    b = _runtime(tmp_path / "in", tmp_path / "chk", tmp_path / "cache_b", out_b, state_store)
    try:
        assert steps.run_one_batch(a)["batch_id"] == 0
        assert a.log.latest_known()[2], "A remembers its own commit of batch 0"
        assert steps.run_one_batch(b)["batch_id"] == 1          # B read the log: batch 0 is committed
        with pytest.raises(ConcurrentRunError, match=r"offsets\[1\] was written by another runner"):
            steps.plan_batch(a)
        assert not a.log.latest_known()[2], "a failed write forgets what A remembered"
        assert a.log.get_offsets(1).owner == b.run_id and a.log.get_commit(1).extra["run_id"] == b.run_id
        while steps.run_one_batch(b) is not None:
            pass
    finally:
        a.close()
        b.close()
    assert out_b[max(out_b)] == totals and max(out_b) == 3

"""The file source's changed-file check across retries (sources/file_changes.py): a file fixed
after a failed batch is read as fixed, and what that read saw is what the next batch compares
with -- also when the batch that read it failed again later and a third start redid it."""
from __future__ import annotations

import json
import os

import pytest

import increments as inc


def _lines(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_a_fixed_file_redone_twice_is_not_flagged_by_the_next_batch(tmp_path):
    inp, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    os.makedirs(inp)
    _lines(f"{inp}/a.json", [{"id": 1}])
    with open(f"{inp}/b.json", "w") as f:
        f.write('{"id": 2}\n{"id": oops}\n')
    got: dict[int, list] = {}
    fail_batch: set[int] = set()

    def sink(table, batch_id):
        if batch_id in fail_batch:
            fail_batch.discard(batch_id)
            raise RuntimeError("the sink is down")
        got[batch_id] = table.column("id").to_pylist()

    def run():
        q = (inc.read_stream.files(inp, "json", "id BIGINT", max_files_per_trigger=1).write_stream
             .foreach_batch(sink).checkpoint_location(chk).query_name("ingest").trigger(available_now=True).start())
        q.await_termination()
        return q
    with pytest.raises(inc.StreamingQueryException, match="b.json, line 2"):
        run()                                  # batch 1 fails reading b.json
    _lines(f"{inp}/b.json", [{"id": 2}, {"id": 3}])   # fixed: another size than its listing said
    fail_batch.add(1)
    with pytest.raises(inc.StreamingQueryException, match="the sink is down"):
        run()                                  # the redo reads b as fixed, then fails in the sink
    _lines(f"{inp}/c.json", [{"id": 4}])
    q = run()                                  # redo of batch 1 again, then c's batch
    assert q.exception() is None
    assert got == {0: [1], 1: [2, 3], 2: [4]}


"""The offsets/commits log on both backends (SQLite file and the real PostgreSQL)."""
from __future__ import annotations

import uuid

import pytest

from increments.checkpoint.log import BatchLog, CommitEntry, OffsetsEntry
from increments.errors import ConcurrentRunError


def _offsets(n: int, **kw) -> OffsetsEntry:
    base = dict(batch_id=n, start={"0": n - 1}, end={"0": n}, watermark_ms=1000 * n, late_watermark_ms=1000 * (n - 1),
                input_watermarks_ms={"0": 5}, timestamp_ms=1_700_000_000_000 + n)
    base.update(kw)
    return OffsetsEntry(**base)


def _commit(n: int) -> CommitEntry:
    return CommitEntry(batch_id=n, next_watermark_ms=2000 * n, next_input_watermarks_ms={"0": 2000 * n},
                       num_input_rows=10, num_output_rows=3, state_versions={"0": n}, sink_version=7)


@pytest.fixture
def log(log_url):
    return BatchLog(log_url, "q-" + uuid.uuid4().hex[:8], "test_query")


def test_empty_log(log):
    assert log.latest_offsets() is None
    assert log.latest_commit() is None
    assert log.history() == []


def test_offsets_and_commits_round_trip(log):
    log.write_offsets(_offsets(0), "run-a")
    got = log.get_offsets(0)
    assert (got.start, got.end, got.watermark_ms, got.late_watermark_ms) == ({"0": -1}, {"0": 0}, 0, -1000)
    assert got.input_watermarks_ms == {"0": 5} and got.owner == "run-a" and got.attempt == 1
    log.write_commit(_commit(0), "run-a")
    c = log.latest_commit()
    assert (c.batch_id, c.next_watermark_ms, c.sink_version, c.state_versions) == (0, 0, 7, {"0": 0})
    log.write_offsets(_offsets(1), "run-a")
    assert log.latest_offsets().batch_id == 1
    assert log.latest_commit().batch_id == 0
    hist = log.history()
    assert [(o.batch_id, c.batch_id if c else None) for o, c in hist] == [(0, 0), (1, None)]


def test_offsets_fence_refuses_second_writer(log):
    log.write_offsets(_offsets(0), "run-a")
    with pytest.raises(ConcurrentRunError, match=r"offsets\[0\] was written by another runner \(run run-a\)"):
        log.write_offsets(_offsets(0), "run-b")


def test_commit_only_by_owner_and_once(log):
    log.write_offsets(_offsets(0), "run-a")
    with pytest.raises(ConcurrentRunError, match="taken over by run run-a"):
        log.write_commit(_commit(0), "run-b")
    log.write_commit(_commit(0), "run-a")
    with pytest.raises(ConcurrentRunError, match="already committed"):
        log.write_commit(_commit(0), "run-a")


def test_redo_claim_is_compare_and_swap(log):
    log.write_offsets(_offsets(0), "run-a")
    seen_by_b = log.latest_offsets()
    seen_by_c = log.latest_offsets()
    claimed = log.claim_redo(seen_by_b, "run-b")
    assert claimed.owner == "run-b" and claimed.attempt == 2
    with pytest.raises(ConcurrentRunError, match="claimed the redo of batch 0"):
        log.claim_redo(seen_by_c, "run-c")
    with pytest.raises(ConcurrentRunError):
        log.write_commit(_commit(0), "run-a")  # the crashed-and-back runner lost the batch
    log.write_commit(_commit(0), "run-b")
    assert log.latest_commit().extra == {}


def test_queries_are_isolated(log_url):
    a = BatchLog(log_url, "qa-" + uuid.uuid4().hex[:6])
    b = BatchLog(log_url, "qb-" + uuid.uuid4().hex[:6])
    a.write_offsets(_offsets(0), "r")
    b.write_offsets(_offsets(0), "r")
    assert a.latest_offsets().batch_id == b.latest_offsets().batch_id == 0


def test_newer_entry_version_is_refused(log):
    import sqlalchemy as sa
    log.write_offsets(_offsets(0), "r")
    with log.engine.begin() as c:
        c.execute(sa.update(log.offsets.table).where(log.offsets.table.c.query_id == log.query_id).values(entry_version=99))
    with pytest.raises(RuntimeError, match="newer increments"):
        log.latest_offsets()


def test_the_log_reconnects_when_its_connection_is_lost(log, log_url):
    """The log's connection is closed under it (a restarted database, a dropped network): reads and
    writes go on through a new connection, and a write is applied exactly once."""
    log.write_offsets(_offsets(0), "run-a")
    if log.backend == "postgresql":
        import psycopg
        pid = log.conn.execute("SELECT pg_backend_pid()", ())[0]
        with psycopg.connect(log_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    else:
        log.conn._conn.close()            # sqlite3: a closed connection raises ProgrammingError
    log.write_commit(_commit(0), "run-a")
    assert log.latest_commit().batch_id == 0
    log.write_offsets(_offsets(1), "run-a")
    assert [(o.batch_id, c is not None) for o, c in log.history()] == [(0, True), (1, False)]


def test_the_log_counts_its_statements_and_commits(log):
    before = dict(log.stats)
    log.write_offsets(_offsets(0), "run-a")            # one insert: one statement, one commit
    assert log.offsets.owner(0) == ("run-a", 1)        # one read
    log.write_commit(_commit(0), "run-a")              # the fenced insert: one statement, one commit
    assert log.stats["statements"] - before["statements"] == 3
    assert log.stats["commits"] - before["commits"] == 2
    with pytest.raises(ConcurrentRunError):
        log.write_commit(_commit(0), "run-b")          # refused: nothing written, nothing committed
    assert log.stats["commits"] - before["commits"] == 2

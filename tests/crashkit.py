"""The crash kit of the subprocess query scripts (tests/*/*_query.py): what every such script
needs around its query, so that the script itself holds only the query.

A script starts with

    import os, sys
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
    import crashkit  # noqa: E402

Importing crashkit puts the repository root first on sys.path (so `state` is the package, not
tests/state) before it imports increments. Then:

- `crash_after(args)`: with args = [batch id, step] (the script's trailing command-line
  arguments), registers a CrashAt listener (below) that SIGKILLs the process right after that
  protocol step (plan, read, process, write, commit) of that batch: a real crash, no cleanup, no
  flush. With no args, nothing.
- `crash_after_env(var)`: the same from an environment variable "<batch id>:<step>".
- `batch_file_writer(out_dir, render, ext)` / `jsonl_writer(out_dir, row)`: the documented
  idempotent foreach_batch pattern: one file per batch id, written to a temporary name and renamed
  over <out_dir>/<batch id><ext>, so a replayed batch replaces its file and a crash mid-write
  leaves no partial file under the final name.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, Callable

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
if not sys.path or sys.path[0] != ROOT:
    sys.path.insert(0, ROOT)

import increments as inc  # noqa: E402


class CrashAt(inc.StreamingQueryListener):
    """SIGKILLs its own process right after `step` of batch `batch` completed."""

    def __init__(self, batch: int, step: str):
        self.batch, self.step = int(batch), step

    def on_batch_step(self, query_name: str, batch_id: int, step: str) -> None:
        if batch_id == self.batch and step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def crash_after(args: list[str]) -> None:
    """args: [] (no crash) or [batch id, step]."""
    if args:
        batch, step = args
        inc.streams.add_listener(CrashAt(int(batch), step))


def crash_after_env(var: str = "CRASH_AT") -> None:
    """The environment variable `var` = "<batch id>:<step>" (unset or empty: no crash)."""
    spec = os.environ.get(var)
    if spec:
        crash_after(spec.split(":"))


def batch_file_writer(out_dir: str, render: Callable[[Any], str], ext: str) -> Callable[[Any, int], None]:
    """A foreach_batch function writing render(table) to <out_dir>/<batch id><ext>, idempotently
    (the temporary name carries the pid: two processes may write the same batch at once)."""
    os.makedirs(out_dir, exist_ok=True)

    def write(table, batch_id: int) -> None:
        tmp = os.path.join(out_dir, f".{batch_id}.{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            f.write(render(table))
        os.replace(tmp, os.path.join(out_dir, f"{batch_id}{ext}"))
    return write


def jsonl_writer(out_dir: str, row: Callable[[dict], Any] = lambda r: r) -> Callable[[Any, int], None]:
    """One JSON line per output row (row(r), non-JSON values as str) in <out_dir>/<batch id>.jsonl."""
    return batch_file_writer(
        out_dir, lambda t: "".join(json.dumps(row(r), default=str) + "\n" for r in t.to_pylist()), ".jsonl")


class _WriteOf(inc.StreamingQueryListener):
    """Remembers the batch whose write step comes next (the one whose process step just finished)."""
    batch: int | None = None

    def on_batch_step(self, query_name: str, batch_id: int, step: str) -> None:
        if step == "process":
            _WriteOf.batch = batch_id


def kafka_crash_at(batch: int, point: str) -> None:
    """SIGKILL inside the Kafka sink's transaction of batch `batch` (sinks/kafka/sink.py), by
    wrapping confluent_kafka.Producer before the sink makes its producer. `point`:
      first_record    right after the batch's first record was handed to the producer
      before_commit   every record acknowledged by the broker and the marker offsets sent, before
                      commit_transaction (an open transaction holding the whole batch)
      in_commit:<ms>  <ms> milliseconds after commit_transaction began (EndTxn may or may not have
                      reached the broker: either outcome must give the output once)
      after_commit    right after commit_transaction returned (the batch is in Kafka, commits[N] is not)
    """
    import threading
    import time

    import confluent_kafka
    inc.streams.add_listener(_WriteOf())
    kill = lambda: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
    base = confluent_kafka.Producer

    def armed() -> bool:
        return _WriteOf.batch == batch

    class CrashingProducer(base):
        def produce(self, *args, **kw):
            out = super().produce(*args, **kw)
            if point == "first_record" and armed():
                kill()
            return out

        def send_offsets_to_transaction(self, *args, **kw):
            out = super().send_offsets_to_transaction(*args, **kw)
            if point == "before_commit" and armed():
                self.flush(30)
                kill()
            return out

        def commit_transaction(self, *args, **kw):
            if point.startswith("in_commit") and armed():
                delay = float(point.split(":")[1]) / 1000 if ":" in point else 0.0
                threading.Thread(target=lambda: (time.sleep(delay), kill()), daemon=True).start()
            out = super().commit_transaction(*args, **kw)
            if point.startswith("in_commit") and armed():
                time.sleep(5)           # the commit returned before the kill: wait for it
            if point == "after_commit" and armed():
                kill()
            return out
    confluent_kafka.Producer = CrashingProducer

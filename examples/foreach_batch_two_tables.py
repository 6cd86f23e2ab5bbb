"""The idempotent foreach_batch pattern: one micro-batch written to TWO Delta tables, exactly once.

foreach_batch(fn) hands you each batch with its id. After a crash before the batch's commit the
engine calls fn again with the SAME batch id and the same rows, so fn must make a second call a
no-op. With Delta that is one line per table: commit with the app transaction
(app_id = a stable id of this writer, version = batch_id) and skip a table whose
transaction_version(app_id) already reached batch_id. Each table is checked on its own, so a
crash between the two writes is repaired by the retry writing only the missing one.

    python examples/foreach_batch_two_tables.py [workdir]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

import increments as inc

APP_ID = "orders-fanout-v1"   # stable across restarts: it names this writer in both tables' logs


def write_once(path: str, table: pa.Table, batch_id: int) -> bool:
    """Append `table` as batch `batch_id` unless the table already holds it. True if written."""
    if DeltaTable.is_deltatable(path):
        done = DeltaTable(path).transaction_version(APP_ID)
        if done is not None and done >= batch_id:
            return False
    write_deltalake(path, table, mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction(app_id=APP_ID, version=batch_id)]))
    return True


def make_writer(lake: str):
    def write_batch(batch: pa.Table, batch_id: int) -> None:
        big = batch.filter(pc.greater_equal(batch.column("amount"), 100.0))
        write_once(os.path.join(lake, "all_orders"), batch, batch_id)
        if big.num_rows:   # an empty batch needs no commit: nothing to duplicate
            write_once(os.path.join(lake, "big_orders"), big, batch_id)
    return write_batch


def main(workdir: str) -> None:
    src = os.path.join(workdir, "incoming")
    os.makedirs(src, exist_ok=True)
    for f in range(3):
        with open(os.path.join(src, f"orders-{f}.json"), "w") as fh:
            for i in range(5):
                fh.write(json.dumps({"order_id": f * 10 + i, "amount": 40.0 * i}) + "\n")
    lake = os.path.join(workdir, "lake")
    q = (inc.read_stream.files(src, "json", "order_id BIGINT, amount DOUBLE", max_files_per_trigger=1)
         .write_stream.foreach_batch(make_writer(lake))
         .checkpoint_location(os.path.join(workdir, "chk")).trigger(available_now=True).start())
    q.await_termination()
    # a replay of batch 1 (what a restart after a crash does) changes nothing
    make_writer(lake)(pa.table({"order_id": [10], "amount": [999.0]}), 1)
    for name in ("all_orders", "big_orders"):
        path = os.path.join(lake, name)
        # inc.read.delta, not DeltaTable.to_pyarrow_table(): that one can abort the process at exit
        # (about one exit in six after writes on another thread; tests/sinks/test_delta_exit.py)
        rows = inc.read.delta(path).load().num_rows
        print(f"{name}: {rows} rows, last batch {DeltaTable(path).transaction_version(APP_ID)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="fanout-"))

"""The AUTO CDC crash suite's query, run as a subprocess: JSON change files (one per batch) ->
apply_changes (SCD type 1 or 2) -> Delta or PostgreSQL, optionally killed (SIGKILL) right after a
protocol step of a batch.

Usage: python cdc_query.py <json config>
config: input, checkpoint, sink (delta|postgres), target (path or table), pg_url, scd, state_store,
        crash_batch, crash_step
"""
from __future__ import annotations

import json
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402


def main() -> None:
    c = json.loads(sys.argv[1])
    if c.get("crash_step"):
        crashkit.crash_after([c["crash_batch"], c["crash_step"]])
    changes = inc.read_stream.files(c["input"], "json", "id BIGINT, name STRING, city STRING, op STRING, seq BIGINT",
                                    max_files_per_trigger=1)
    w = (changes.write_stream.apply_changes(keys=["id"], sequence_by="seq", apply_as_deletes="op = 'DELETE'",
                                            except_columns=["op", "seq"], stored_as_scd_type=c["scd"])
         .checkpoint_location(c["checkpoint"]).query_name("cdc_faulty")
         .option("state_store", c.get("state_store", "rocksdb")).option("state_partitions", 2)
         .trigger(available_now=True))
    if c["sink"] == "postgres":
        q = w.format("postgres").option("url", c["pg_url"]).option("table", c["target"]).start()
    else:
        q = (w.format("delta").option("table_properties", {"delta.enableChangeDataFeed": "true"})
             .start(c["target"]))
    q.await_termination()


if __name__ == "__main__":
    main()

"""Fraud-style running counter: transform_with_state with TTL'd value and map state.

Per card, count transactions and sum amounts per merchant; state expires `TTL` after the batch
that last wrote it (processing time), so a card that goes quiet starts from zero again. A card
that reaches ALERT_COUNT transactions within its TTL is flagged. Runs the query twice (two
AvailableNow drains) with a pause longer than the TTL between them: the second drain's counts
restart because the first drain's state has expired.

    python examples/fraud_counter.py [workdir]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import increments as inc

TTL = "2 seconds"
ALERT_COUNT = 3


class FraudCounter(inc.StatefulProcessor):
    def init(self, handle):
        self.count = handle.get_value_state("count", "n BIGINT, total DOUBLE", ttl=TTL)
        self.by_merchant = handle.get_map_state("by_merchant", "merchant STRING", "amount DOUBLE", ttl=TTL)

    def handle_input_rows(self, key, rows, timer_values):
        c = self.count.get()
        n, total = (c.n, c.total) if c else (0, 0.0)
        for r in rows:
            n, total = n + 1, total + r["amount"]
            prev = self.by_merchant.get_value(r["merchant"])
            self.by_merchant.update_value(r["merchant"], ((prev.amount if prev else 0.0) + r["amount"],))
        self.count.update((n, total))
        yield {"card_id": key[0], "n": n, "total": total, "merchants": len(list(self.by_merchant.keys())),
               "alert": n >= ALERT_COUNT}


OUTPUT = "card_id STRING, n BIGINT, total DOUBLE, merchants BIGINT, alert BOOLEAN"


def write_file(src: str, name: str, rows: list[tuple[str, str, float]]) -> None:
    os.makedirs(src, exist_ok=True)
    with open(os.path.join(src, name), "w") as f:
        for card, merchant, amount in rows:
            f.write(json.dumps({"card_id": card, "merchant": merchant, "amount": amount}) + "\n")


def build(src: str, checkpoint: str, name: str = "fraud_counter", state_store: str = "rocksdb"):
    tx = inc.read_stream.files(src, "json", "card_id STRING, merchant STRING, amount DOUBLE", max_files_per_trigger=1)
    flagged = tx.group_by("card_id").transform_with_state(FraudCounter(), OUTPUT, time_mode="processing_time",
                                                          output_mode="update")
    return (flagged.write_stream.format("memory").output_mode("update").query_name(name)
            .checkpoint_location(checkpoint).option("state_store", state_store).trigger(available_now=True))


def main(workdir: str) -> None:
    src, chk = os.path.join(workdir, "tx"), os.path.join(workdir, "chk")
    write_file(src, "tx-000.json", [("c1", "shop", 10.0), ("c1", "shop", 5.0), ("c2", "bar", 7.5)])
    write_file(src, "tx-001.json", [("c1", "fuel", 60.0)])          # c1 reaches 3: alert
    drain(src, chk)
    time.sleep(2.5)                                                   # longer than the TTL
    write_file(src, "tx-002.json", [("c1", "shop", 1.0)])            # c1's state expired: n restarts at 1
    drain(src, chk)


def drain(src: str, chk: str) -> None:
    """One AvailableNow run (the memory sink holds this run's batches)."""
    build(src, chk).start().await_termination()
    for batch_id, table in sorted(inc.memory_batches("fraud_counter").items()):
        print(f"batch {batch_id}:", table.to_pylist())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="fraud-counter-"))

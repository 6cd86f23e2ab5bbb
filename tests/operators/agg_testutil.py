"""Helpers for the aggregation / dedup / watermark tests: one JSON file per micro-batch, a file
source with max_files_per_trigger=1, trigger(available_now=True) and foreach_batch collecting
each batch's rows, as SEMANTICS.md's observations were made on Spark."""
from __future__ import annotations

import datetime as dt
from typing import Any, Callable

import increments as inc
from jsonl_testutil import write_files  # noqa: F401  (re-exported to the tests)

SCHEMA = "id STRING, ts TIMESTAMP, v BIGINT"
STORES = ("rocksdb", "memory")


def row(id: str, hms: str, v: int = 1) -> dict[str, Any]:
    """A row at 2024-01-01T<hms>Z (hms: "10:04:59" or "10:04")."""
    if hms.count(":") == 1:
        hms += ":00"
    return {"id": id, "ts": f"2024-01-01T{hms}Z", "v": v}


def hm(v: Any) -> Any:
    """Readable form of a value: instants as 'HH:MM[:SS]', window structs as ('HH:MM', 'HH:MM')."""
    if isinstance(v, dict) and set(v) == {"start", "end"}:
        return (hm(v["start"]), hm(v["end"]))
    if isinstance(v, dt.datetime):
        v = v.astimezone(dt.timezone.utc)
        return v.strftime("%H:%M") if v.second == 0 else v.strftime("%H:%M:%S")
    return v


def run(tmp_path, batches: list[list[dict]], build: Callable[[Any], Any], mode: str, store: str,
        name: str = "q", partitions: int | None = None):
    """Run the query to completion; returns ({batch_id: sorted rows as tuples}, progress list, checkpoint)."""
    src = write_files(str(tmp_path / f"in-{name}"), batches)
    chk = str(tmp_path / f"chk-{name}")
    out: dict[int, list[tuple]] = {}

    def collect(table, batch_id):
        out[batch_id] = sorted((tuple(hm(v) for v in r.values()) for r in table.to_pylist()), key=repr)

    df = inc.read_stream.files(src, "json", SCHEMA, max_files_per_trigger=1)
    w = (build(df).write_stream.output_mode(mode).foreach_batch(collect).option("state_store", store)
         .checkpoint_location(chk).trigger(available_now=True))
    if partitions:
        w = w.option("state_partitions", partitions)
    q = w.start()
    q.await_termination()
    return out, q.recent_progress, chk


def watermarks(progress: list[dict]) -> list[str | None]:
    return [hm_iso(p["event_time"].get("watermark")) for p in progress]


def hm_iso(s: str | None) -> str | None:
    if s is None:
        return None
    if s.startswith("1970"):
        return "epoch"
    return hm(dt.datetime.fromisoformat(s.replace("Z", "+00:00")))


def metrics(progress: list[dict], i: int = 0) -> list[tuple[int, int, int, int]]:
    """Per batch: (num_rows_total, num_rows_updated, num_rows_removed, num_rows_dropped_by_watermark)."""
    return [(s["num_rows_total"], s["num_rows_updated"], s["num_rows_removed"], s["num_rows_dropped_by_watermark"])
            for s in (p["state_operators"][i] for p in progress)]

"""Shared scenario for the join tests: two file sources (one file per batch each), driven with
trigger(available_now=True) into a memory sink, through the public API.

The scenario (condition: c.ad_id = i.ad_id AND c.click_time BETWEEN i.imp_time AND
i.imp_time + INTERVAL 1 HOUR; both watermarks 10 minutes) and its batch-by-batch outcome, derived
by hand from SEMANTICS.md (state watermarks: imps <= W - 1h - 1ms, clicks <= W - 1ms):

    batch W      imps                         clicks                               inner pairs
    0     00:00  i1(1,10:00) i2(2,10:00)      c1(1,10:20)                          i1-c1
    1     09:50  i3(3,12:00)                  c9(9,12:30) c1b(1,10:50) c8(8,12:40) i1-c1b (imp first)
    2     11:50  i4(4,11:45) i5(5,10:30)      c4(4,11:55) c5(5,10:40) c6(66,10:45) i4-c4, i5-c5 (both new,
                 i6(6,10:30)                  cL(1,9:40) late: dropped                behind state wm)
    3     11:50  i7(7,14:00) i9(9,12:00)      c7(7,14:10)                          i7-c7, i9-c9 (click first)
    4     13:50  (trailing no-data batch: evicts i3 i4 i9, c9 c8 c4)
Unmatched rows get their NULL row when evicted: left i2 (b2), i6 (b2, never stored), i3 (b4);
right c6 (b2, never stored), c8 (b4). Rows in state after each batch: 3, 7, 5, 8, 2.
"""
from __future__ import annotations

import json
import os
import uuid

import increments as inc

COND = "c.ad_id = i.ad_id AND c.click_time BETWEEN i.imp_time AND i.imp_time + INTERVAL 1 HOUR"
IMP_SCHEMA = "imp_id STRING, ad_id BIGINT, imp_time TIMESTAMP"
CLICK_SCHEMA = "click_id STRING, ad_id BIGINT, click_time TIMESTAMP"

IMPS = [
    [("i1", 1, "10:00"), ("i2", 2, "10:00")],
    [("i3", 3, "12:00")],
    [("i4", 4, "11:45"), ("i5", 5, "10:30"), ("i6", 6, "10:30")],
    [("i7", 7, "14:00"), ("i9", 9, "12:00")],
]
CLICKS = [
    [("c1", 1, "10:20")],
    [("c9", 9, "12:30"), ("c1b", 1, "10:50"), ("c8", 8, "12:40")],
    [("c4", 4, "11:55"), ("c5", 5, "10:40"), ("cL", 1, "09:40"), ("c6", 66, "10:45")],
    [("c7", 7, "14:10")],
]
INNER = {0: {("i1", "c1")}, 1: {("i1", "c1b")}, 2: {("i4", "c4"), ("i5", "c5")}, 3: {("i7", "c7"), ("i9", "c9")},
         4: set()}
LEFT_NULLS = {2: {("i2", None), ("i6", None)}, 4: {("i3", None)}}
RIGHT_NULLS = {2: {(None, "c6")}, 4: {(None, "c8")}}
STATE_TOTALS = [3, 7, 5, 8, 2]
DROPPED = [0, 0, 1, 0, 0]
WATERMARKS = ["1970-01-01T00:00:00.000Z", "2024-01-01T09:50:00.000Z", "2024-01-01T11:50:00.000Z",
              "2024-01-01T11:50:00.000Z", "2024-01-01T13:50:00.000Z"]


def ts(hhmm: str) -> str:
    return f"2024-01-01T{hhmm}:00Z"


def write_files(directory: str, files: list[list[dict]]) -> str:
    os.makedirs(directory, exist_ok=True)
    for k, rows in enumerate(files):
        with open(os.path.join(directory, f"{k:04d}.json"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return directory


def scenario_sources(tmp, imp_delay: str | None = "10 minutes", click_delay: str | None = "10 minutes",
                     imps=IMPS, clicks=CLICKS):
    idir = write_files(str(tmp / "imps"), [[{"imp_id": a, "ad_id": b, "imp_time": ts(t)} for a, b, t in f] for f in imps])
    cdir = write_files(str(tmp / "clicks"),
                       [[{"click_id": a, "ad_id": b, "click_time": ts(t)} for a, b, t in f] for f in clicks])
    i = inc.read_stream.files(idir, "json", IMP_SCHEMA, max_files_per_trigger=1)
    c = inc.read_stream.files(cdir, "json", CLICK_SCHEMA, max_files_per_trigger=1)
    if imp_delay:
        i = i.with_watermark("imp_time", imp_delay)
    if click_delay:
        c = c.with_watermark("click_time", click_delay)
    return i.alias("i"), c.alias("c")


def run(frame, tmp, state_store: str = "memory", **options):
    """Run to completion (available_now); returns ({batch_id: rows as dicts}, progress list)."""
    name = "join_" + uuid.uuid4().hex[:8]
    w = (frame.write_stream.format("memory").query_name(name).trigger(available_now=True)
         .checkpoint_location(str(tmp / ("chk_" + name))).option("state_store", state_store))
    for k, v in options.items():
        w = w.option(k, v)
    q = w.start()
    q.await_termination()
    batches = {b: t.to_pylist() for b, t in sorted(inc.memory_batches(name).items())}
    return batches, q.recent_progress


def pairs(batches, a: str = "imp_id", b: str = "click_id") -> dict[int, set]:
    return {k: {(r[a], r[b]) for r in rows} for k, rows in batches.items()}


def join_op(progress: dict) -> dict:
    return next(op for op in progress["state_operators"] if op["operator_name"] == "symmetricHashJoin")


def merge(*dicts) -> dict[int, set]:
    out: dict[int, set] = {b: set() for b in range(5)}
    for d in dicts:
        for k, v in d.items():
            out[k] = out[k] | set(v)
    return out


def check_scenario_metrics(progress) -> None:
    assert [p["batch_id"] for p in progress] == [0, 1, 2, 3, 4]
    assert [p["event_time"]["watermark"] for p in progress] == WATERMARKS
    assert [join_op(p)["num_rows_total"] for p in progress] == STATE_TOTALS
    assert [join_op(p)["num_rows_dropped_by_watermark"] for p in progress] == DROPPED

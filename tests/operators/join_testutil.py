"""Shared scenario for the join tests: two file sources (one file per batch each), driven with
trigger(available_now=True) into a memory sink, through the public API.

The scenario (condition: c.ad_id = i.ad_id AND c.click_time BETWEEN i.imp_time AND
i.imp_time + INTERVAL 1 HOUR; both watermarks 10 minutes) and its batch-by-batch outcome, derived
by hand from SEMANTICS.md and confirmed on Apache Spark 4.3.0 (join_spark_expected.py, scenario
base_*; state watermarks: imps <= W - 1h - 1ms, clicks <= W - 1ms):

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
import uuid

import increments as inc
from jsonl_testutil import write_files  # noqa: F401  (re-exported to the tests)

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


def ts(hhmm: str | None) -> str | None:
    return None if hhmm is None else f"2024-01-01T{hhmm}:00Z"


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


# -- the scenarios compared with Apache Spark 4.3.0 (tests/operators/test_join_spark_parity.py) ----------
# Edge cases (10-minute watermarks on both sides): rows exactly at the previous watermark (a3, b5 in
# batch 1 are not late yet: WL_1 = W_0 = epoch; a8 at 10:50 = WL_2 is), exactly on the condition's
# bounds (b0 = a1's time, b1 = a2's time + 1h, a4/b4), clicks before their impression (b17 then a17),
# new rows already behind the state watermark meeting each other (a9/b9, a12/b12), late rows on both
# sides (bL, a13, b13), a watermark jump of more than an hour (batch 2) and a trailing no-data batch.
EDGE_IMPS = [
    [("a1", 1, "10:00"), ("a2", 2, "10:00")],
    [("a3", 3, "09:50"), ("a4", 4, "09:51"), ("a6", 6, "12:00"), ("a17", 17, "10:15")],
    [("a8", 8, "10:50"), ("a9", 9, "10:51"), ("a15", 15, "13:00")],
    [("a11", 11, "13:00"), ("a12", 12, "12:00"), ("a13", 13, "11:00")],
    [("a16", 16, "15:00")],
]
EDGE_CLICKS = [
    [("b1", 2, "11:00"), ("b0", 1, "10:00"), ("b17", 17, "10:30")],
    [("b4", 4, "10:51"), ("b5", 5, "09:50"), ("b6", 6, "11:59"), ("bL", 1, "09:00")],
    [("b7", 6, "12:00"), ("b9", 9, "10:51"), ("b10", 1, "10:55"), ("b15", 15, "13:00")],
    [("b11", 11, "12:30"), ("b12", 12, "12:30"), ("b13", 13, "11:30")],
    [("b16", 16, "15:30")],
]
COND_STRICT = "c.ad_id = i.ad_id AND c.click_time > i.imp_time AND c.click_time < i.imp_time + INTERVAL 30 MINUTES"
DIM_ROWS = [{"ad_id": 1, "campaign": "a"}, {"ad_id": 4, "campaign": "b"}, {"ad_id": 9, "campaign": "c"},
            {"ad_id": 1, "campaign": "a2"}]
# Several rows per key on both sides, identical click times, a click before its impression (e3).
DUP_IMPS = [[("d1", 1, "10:00"), ("d2", 1, "10:10"), ("d3", 2, "10:00")], [("d4", 1, "10:20")],
            [("d5", 3, "12:00")], [("d6", 4, "13:30")]]
DUP_CLICKS = [[("e1", 1, "10:30"), ("e2", 1, "10:30"), ("e3", 2, "09:59")], [("e4", 1, "10:40"), ("e5", 2, "10:05")],
              [("e6", 3, "12:00"), ("e7", 1, "11:05")], [("e8", 4, "13:20")]]
# One-sided conjuncts: pushed into the non-preserved sides (and their scans), pre-join filters on preserved ones.
COND_PRE = COND + " AND i.imp_id <> 'i2' AND c.click_id <> 'c8' AND i.imp_id <> 'd3' AND c.click_id <> 'e2'"
# NULL keys (n2, m2) and NULL event times (n3, m3): Spark filters them out of the non-preserved sides
# (inferred IS NOT NULL; NULL keys already in the scan) and matches a NULL key with a NULL key in
# the join state (full outer: n2-m2).
NUL_IMPS = [[("n1", 1, "10:00"), ("n2", None, "10:00"), ("n3", 3, None)], [("n4", 4, "11:00")], [("n5", 5, "12:30")]]
NUL_CLICKS = [[("m1", 1, "10:20"), ("m2", None, "10:20"), ("m3", 3, None)], [("m4", 4, "11:10")], [("m5", 5, "12:40")]]
DATA = {"base": (IMPS, CLICKS), "edge": (EDGE_IMPS, EDGE_CLICKS), "dup": (DUP_IMPS, DUP_CLICKS),
        "nul": (NUL_IMPS, NUL_CLICKS)}


def parity_query(tmp, data: str, how: str, kind: str):
    """The query of one Spark comparison. kind: ss (imps ⋈ clicks on COND), rev (clicks ⋈ imps on
    COND), strict (COND_STRICT), pre (COND_PRE), using (on=["ad_id"]), static / static_using (clicks ⋈ a static JSON
    file read with inc.read.files, on "c.ad_id = d.ad_id" / ["ad_id"])."""
    imps, clicks = scenario_sources(tmp, imps=DATA[data][0], clicks=DATA[data][1])
    if kind == "ss":
        return imps.join(clicks, COND, how)
    if kind == "rev":
        return clicks.join(imps, COND, how)
    if kind == "strict":
        return imps.join(clicks, COND_STRICT, how)
    if kind == "pre":
        return imps.join(clicks, COND_PRE, how)
    if kind == "using":
        return imps.join(clicks, ["ad_id"], how)
    d = tmp / "dim"
    d.mkdir()
    (d / "dim.json").write_text("".join(json.dumps(r) + "\n" for r in DIM_ROWS))
    dim = inc.read.files(str(d), "json", "ad_id BIGINT, campaign STRING")
    if kind == "static":
        return clicks.join(dim.alias("d"), "c.ad_id = d.ad_id", how)
    return clicks.join(dim, ["ad_id"], how)


def norm(v):
    """A value as the Spark comparison recorded it (timestamps as 'YYYY-MM-DD HH:MM:SS' UTC)."""
    import datetime as dt
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return v

"""transform_with_state: value / list / map state, timers in both time modes, TTL, crash and replay.

Every test runs on both state providers (rocksdb, memory) through the public API. TTL and
processing-time timers depend on the batch's processing time (the wall clock at plan time): the
tests sleep past a short TTL / timer, they never assert on durations.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid

import pyarrow as pa
import pytest

import increments as inc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORES = ["rocksdb", "memory"]
UTC = dt.timezone.utc


def ts(sec: float) -> dt.datetime:
    return dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=sec)


def ms(sec: float) -> int:
    return int(ts(sec).timestamp() * 1000)


def start(frame, store, tmp_path, mode="append", trigger=None, **opts):
    name = f"tws_{uuid.uuid4().hex[:8]}"
    w = (frame.write_stream.format("memory").output_mode(mode).query_name(name)
         .checkpoint_location(str(tmp_path / "chk")).option("state_store", store))
    for k, v in opts.items():
        w = w.option(k, v)
    if trigger:
        w = w.trigger(**trigger)
    return w.start(), name


def rows_of(name, batch=None):
    if batch is None:
        return inc.memory_table(name).to_pylist()
    return inc.memory_batches(name)[batch].to_pylist()


# --- value, list and map state ----------------------------------------------------------------
class AllKinds(inc.StatefulProcessor):
    def init(self, handle):
        self.count = handle.get_value_state("count", "n BIGINT")
        self.items = handle.get_list_state("items", "item STRING, qty BIGINT")
        self.totals = handle.get_map_state("totals", "item STRING", "qty BIGINT")

    def handle_input_rows(self, key, rows, timer_values):
        n = (self.count.get() or (0,))[0]
        for r in rows:
            n += 1
            if r["item"] == "reset":
                self.items.clear()
                self.totals.clear()
                continue
            if r["item"] == "drop":
                self.totals.remove_key("a")
                continue
            self.items.append_value({"item": r["item"], "qty": r["qty"]})
            cur = self.totals.get_value(r["item"])
            self.totals.update_value(r["item"], (cur.qty if cur else 0) + r["qty"])
        self.count.update(n)
        items = [f"{i.item}:{i.qty}" for i in self.items.get()]
        totals = sorted(f"{k.item}={v.qty}" for k, v in self.totals.iterator())
        yield (key[0], n, ",".join(items), ",".join(totals), self.items.exists(), self.totals.contains_key("a"))


@pytest.mark.parametrize("store", STORES)
def test_value_list_and_map_state(store, tmp_path):
    src = inc.read_stream.memory("user STRING, item STRING, qty BIGINT")
    out = "user STRING, n BIGINT, items STRING, totals STRING, has_items BOOLEAN, has_a BOOLEAN"
    q, name = start(src.group_by("user").transform_with_state(AllKinds(), out), store, tmp_path)
    try:
        src.add_data([("u1", "a", 1), ("u1", "b", 2), ("u2", "a", 5)])
        q.process_all_available()
        src.add_data([("u1", "a", 3), ("u2", "drop", 0)])
        q.process_all_available()
        src.add_data([("u1", "reset", 0), ("u3", "c", 1)])
        q.process_all_available()
    finally:
        q.stop()
    assert sorted(rows_of(name, 0), key=lambda r: r["user"]) == [
        {"user": "u1", "n": 2, "items": "a:1,b:2", "totals": "a=1,b=2", "has_items": True, "has_a": True},
        {"user": "u2", "n": 1, "items": "a:5", "totals": "a=5", "has_items": True, "has_a": True}]
    assert sorted(rows_of(name, 1), key=lambda r: r["user"]) == [
        {"user": "u1", "n": 3, "items": "a:1,b:2,a:3", "totals": "a=4,b=2", "has_items": True, "has_a": True},
        {"user": "u2", "n": 2, "items": "a:5", "totals": "", "has_items": True, "has_a": False}]
    assert sorted(rows_of(name, 2), key=lambda r: r["user"]) == [
        {"user": "u1", "n": 4, "items": "", "totals": "", "has_items": False, "has_a": False},
        {"user": "u3", "n": 1, "items": "c:1", "totals": "c=1", "has_items": True, "has_a": False}]
    # the state is in the versioned store and readable as a table
    state = inc.read_state(str(tmp_path / "chk"), 0, version=2)
    counts = {r["user"]: r["value"]["n"] for r in state.to_pylist() if r["kind"] == "value" and r["name"] == "count"}
    assert counts == {"u1": 4, "u2": 2, "u3": 1}
    maps = {(r["user"], r["map_key"]["item"]): r["value"]["qty"] for r in state.to_pylist() if r["kind"] == "map"}
    assert maps == {("u3", "c"): 1}
    lists = {r["user"]: r["list_values"] for r in state.to_pylist() if r["kind"] == "list"}
    assert lists == {"u2": [{"item": "a", "qty": 5}], "u3": [{"item": "c", "qty": 1}]}
    earlier = inc.read_state(str(tmp_path / "chk"), 0, version=0).to_pylist()
    assert {r["user"]: r["value"]["n"] for r in earlier if r["kind"] == "value"} == {"u1": 2, "u2": 1}
    prog = q.recent_progress[-1]["state_operators"][0]
    assert prog["operator_name"] == "transformWithStateInPySparkExec"
    assert prog["num_rows_total"] == len(state)


class DropVar(inc.StatefulProcessor):
    """Counts in `v1` until a row says 'forget': then every key's v1 is deleted at the next init."""
    forget = False

    def init(self, handle):
        if DropVar.forget:
            handle.delete_if_exists("v1")
        self.v1 = handle.get_value_state("v1", "n BIGINT")

    def handle_input_rows(self, key, rows, timer_values):
        n = (self.v1.get() or (0,))[0] + len(list(rows))
        self.v1.update(n)
        return [{"k": key[0], "n": n}]


@pytest.mark.parametrize("store", STORES)
def test_delete_if_exists_drops_the_variable_for_every_key(store, tmp_path):
    src = inc.read_stream.memory("k STRING")
    DropVar.forget = False
    q, name = start(src.group_by("k").transform_with_state(DropVar(), "k STRING, n BIGINT"), store, tmp_path)
    try:
        src.add_data([("a",), ("b",), ("a",)])
        q.process_all_available()
        DropVar.forget = True
        src.add_data([("a",)])
        q.process_all_available()
    finally:
        q.stop()
        DropVar.forget = False
    assert sorted((r["k"], r["n"]) for r in rows_of(name, 0)) == [("a", 2), ("b", 1)]
    assert rows_of(name, 1) == [{"k": "a", "n": 1}]
    state = inc.read_state(str(tmp_path / "chk"), 0).to_pylist()
    assert [(r["k"], r["value"]["n"]) for r in state] == [("a", 1)]


# --- event-time timers ---------------------------------------------------------------------------
class IdleAlarm(inc.StatefulProcessor):
    """Per key: remember the last event; an event-time timer at last + 10 s emits 'idle'."""

    def init(self, handle):
        self.h = handle
        self.last = handle.get_value_state("last", "t BIGINT")

    def handle_input_rows(self, key, rows, tv):
        t = max(int(r["ts"].timestamp() * 1000) for r in rows)
        prev = self.last.get()
        if prev:
            self.h.delete_timer(prev.t + 10_000)
        self.last.update(t)
        self.h.register_timer(t + 10_000)
        yield {"k": key[0], "what": "seen", "at_ms": t, "watermark_ms": tv.get_current_watermark_in_ms()}

    def handle_expired_timer(self, key, tv, info):
        assert list(self.h.list_timers()) == []
        self.last.clear()
        yield {"k": key[0], "what": "idle", "at_ms": info.get_expiry_time_in_ms(),
               "watermark_ms": tv.get_current_watermark_in_ms()}


@pytest.mark.parametrize("store", STORES)
def test_event_time_timers_fire_when_the_watermark_passes_them(store, tmp_path):
    src = inc.read_stream.memory("k STRING, ts TIMESTAMP")
    frame = (src.with_watermark("ts", "5 seconds").group_by("k")
             .transform_with_state(IdleAlarm(), "k STRING, what STRING, at_ms BIGINT, watermark_ms BIGINT",
                                   time_mode="event_time"))
    q, name = start(frame, store, tmp_path)
    steps = []
    try:
        for data in ([("a", ts(0)), ("b", ts(3))],      # timers a@10 s, b@13 s
                     [("b", ts(12)), ("a", ts(1))],     # moved to b@22, a@11; W -> 7 s
                     [("c", ts(20))],                   # W -> 15 s: a's timer fires (no-data batch)
                     [("a", ts(2)), ("c", ts(40))]):    # a@2 <= 15 s: late, dropped; W -> 35 s: b fires
            before = len(inc.memory_table(name)) if inc.memory_batches(name) else 0
            src.add_data(data)
            q.process_all_available()
            steps.append({(r["k"], r["what"], r["at_ms"] - ms(0), r["watermark_ms"])
                          for r in rows_of(name)[before:]})
    finally:
        q.stop()
    assert q.exception() is None
    assert [{x[:3] for x in s} for s in steps] == [
        {("a", "seen", 0), ("b", "seen", 3000)},
        {("b", "seen", 12000), ("a", "seen", 1000)},
        {("c", "seen", 20000), ("a", "idle", 11000)},
        {("c", "seen", 40000), ("b", "idle", 22000)},
    ]
    fired = {x[0]: x[3] for s in steps for x in s if x[1] == "idle"}
    assert fired == {"a": ms(15), "b": ms(35)}          # fired by the batch whose watermark passed them
    assert sum(p["state_operators"][0]["num_rows_dropped_by_watermark"] for p in q.recent_progress) == 1
    assert any(p["num_input_rows"] == 0 and p["sink"]["num_output_rows"] == 1 for p in q.recent_progress)


# --- processing-time timers -------------------------------------------------------------------------
class Reminder(inc.StatefulProcessor):
    """On input: a processing-time timer 300 ms after the batch's time; when it fires: 'remind'."""

    def init(self, handle):
        self.h = handle
        self.n = handle.get_value_state("n", "n BIGINT")

    def handle_input_rows(self, key, rows, tv):
        now = tv.get_current_processing_time_in_ms()
        self.n.update((self.n.get() or (0,))[0] + len(list(rows)))
        self.h.register_timer(now + 300)
        assert tv.get_current_watermark_in_ms() == 0       # Spark 4.3: no watermark declared -> 0
        yield {"k": key[0], "what": "got", "n": self.n.get().n, "t": now}

    def handle_expired_timer(self, key, tv, info):
        assert info.get_expiry_time_in_ms() <= tv.get_current_processing_time_in_ms()
        yield {"k": key[0], "what": "remind", "n": self.n.get().n, "t": info.get_expiry_time_in_ms()}


@pytest.mark.parametrize("store", STORES)
def test_processing_time_timers_run_a_batch_without_new_data_when_due(store, tmp_path):
    src = inc.read_stream.memory("k STRING")
    frame = src.group_by("k").transform_with_state(Reminder(), "k STRING, what STRING, n BIGINT, t BIGINT",
                                                   time_mode="processing_time", output_mode="update")
    q, name = start(frame, store, tmp_path, mode="update")
    try:
        src.add_data([("a",), ("a",), ("b",)])
        q.process_all_available()
        time.sleep(0.4)                                      # past the timers
        q.process_all_available()
        q.process_all_available()
    finally:
        q.stop()
    assert q.exception() is None
    batches = inc.memory_batches(name)
    assert len(batches) == 2                                 # one data batch, one timer batch, no idle batches
    first = batches[0].to_pylist()
    assert sorted((r["k"], r["what"], r["n"]) for r in first) == [("a", "got", 2), ("b", "got", 1)]
    fired = batches[1].to_pylist()
    assert sorted((r["k"], r["what"], r["n"]) for r in fired) == [("a", "remind", 2), ("b", "remind", 1)]
    assert {r["t"] for r in fired} == {first[0]["t"] + 300}
    assert q.recent_progress[-1]["num_input_rows"] == 0
    assert q.recent_progress[-1]["state_operators"][0]["custom_metrics"]["num_expired_timers"] == 2


# --- TTL ---------------------------------------------------------------------------------------------
class Ttl(inc.StatefulProcessor):
    def init(self, handle):
        self.short = handle.get_value_state("short", "n BIGINT", ttl=200)
        self.long = handle.get_value_state("long", "n BIGINT", ttl="1 hour")
        self.lst = handle.get_list_state("lst", "x BIGINT", ttl=200)
        self.map = handle.get_map_state("map", "m STRING", "x BIGINT", ttl_duration_ms=200)

    def handle_input_rows(self, key, rows, tv):
        rows = list(rows)
        out = {"k": key[0], "short": (self.short.get() or (None,))[0], "long": (self.long.get() or (None,))[0],
               "lst": len(list(self.lst.get())), "map": len(list(self.map.keys()))}
        self.short.update((len(rows),))
        self.long.update(((out["long"] or 0) + len(rows),))
        for r in rows:
            self.lst.append_value((1,))
            self.map.update_value(r["m"], (1,))
        yield out


@pytest.mark.parametrize("store", STORES)
def test_ttl_expires_state_by_processing_time(store, tmp_path):
    src = inc.read_stream.memory("k STRING, m STRING")
    frame = src.group_by("k").transform_with_state(
        Ttl(), "k STRING, short BIGINT, long BIGINT, lst BIGINT, map BIGINT", time_mode="processing_time")
    q, name = start(frame, store, tmp_path)
    try:
        src.add_data([("a", "x"), ("a", "y")])
        q.process_all_available()
        src.add_data([("a", "x")])
        q.process_all_available()
        time.sleep(0.3)                                      # past the 200 ms TTL
        src.add_data([("a", "z")])
        q.process_all_available()
    finally:
        q.stop()
    got = rows_of(name)
    assert got[0] == {"k": "a", "short": None, "long": None, "lst": 0, "map": 0}
    assert got[2] == {"k": "a", "short": None, "long": 3, "lst": 0, "map": 0}    # short-TTL state expired
    stamps = [p["timestamp"] for p in q.recent_progress]
    assert len(stamps) == 3
    state = inc.read_state(str(tmp_path / "chk"), 0).to_pylist()
    live = [r for r in state if not r["kind"].startswith("~")]
    assert sorted((r["kind"], r["name"]) for r in live) == [("list", "lst"), ("map", "map"), ("value", "long"),
                                                            ("value", "short")]
    now = int(time.time() * 1000)
    assert all(r["expires_at_ms"] is None or r["expires_at_ms"] > now - 5000 for r in live)
    removed = sum(p["state_operators"][0]["custom_metrics"]["num_values_removed_due_to_ttl_expiry"]
                  for p in q.recent_progress)
    assert removed == 2        # map entries x and y (the values and list were rewritten before cleanup)


def test_ttl_and_timers_need_a_time_mode(tmp_path):
    src = inc.read_stream.memory("k STRING")
    frame = src.group_by("k").transform_with_state(Ttl(), "k STRING, short BIGINT, long BIGINT, lst BIGINT, map BIGINT")
    q, _ = start(frame, "memory", tmp_path)
    src.add_data([("a",)])
    with pytest.raises(inc.StreamingQueryException, match="ttl needs time_mode"):
        q.process_all_available()
    q.stop()


def test_output_must_match_the_declared_schema(tmp_path):
    class Bad(inc.StatefulProcessor):
        def handle_input_rows(self, key, rows, tv):
            yield {"k": key[0], "n": "not a number"}
    src = inc.read_stream.memory("k STRING")
    q, _ = start(src.group_by("k").transform_with_state(Bad(), "k STRING, n BIGINT"), "memory", tmp_path)
    src.add_data([("a",)])
    with pytest.raises(inc.StreamingQueryException, match="output schema"):
        q.process_all_available()
    q.stop()


def test_arrow_and_tuple_outputs(tmp_path):
    class Mixed(inc.StatefulProcessor):
        def handle_input_rows(self, key, rows, tv):
            n = len(list(rows))
            yield (key[0], n)
            yield pa.table({"n": [n * 10], "k": [key[0]]})
    src = inc.read_stream.memory("k STRING")
    q, name = start(src.group_by("k").transform_with_state(Mixed(), "k STRING, n BIGINT"), "memory", tmp_path,
                    state_partitions=1)
    try:
        src.add_data([("a",), ("b",), ("a",)])
        q.process_all_available()
    finally:
        q.stop()
    assert rows_of(name) == [{"k": "a", "n": 2}, {"k": "a", "n": 20}, {"k": "b", "n": 1}, {"k": "b", "n": 10}]


# --- crash and replay --------------------------------------------------------------------------------
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tws_crash_query.py")
CLICKS = [
    [("u1", 0, "home"), ("u2", 1, "home"), ("u1", 4, "item")],   # timers u1@24, u2@21
    [("u1", 8, "cart"), ("u3", 9, "home")],                     # u1 -> @28, u3@29
    [("u2", 30, "item")],                                       # u2 -> @50; W -> 25 s
    [("u3", 60, "home"), ("u4", 61, "x"), ("u1", 2, "late")],   # u1@2 <= W_2 = 4 s: late; W -> 56 s
    [("u4", 62, "y")],                                          # W = 56 s: u1, u2 close
    [("u5", 100, "home")],                                      # W -> 95 s: the no-data batch closes u3, u4
]


def _write_clicks(src):
    os.makedirs(src, exist_ok=True)
    for i, rows in enumerate(CLICKS):
        with open(os.path.join(src, f"part-{i:03d}.json"), "w") as f:
            for u, sec, page in rows:
                f.write(json.dumps({"user_id": u, "event_time": ts(sec).isoformat(), "page": page}) + "\n")


def _run_job(src, out, chk, store, crash=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env.pop("CRASH_AT", None)
    if crash:
        env["CRASH_AT"] = crash
    return subprocess.run([sys.executable, JOB, src, out, chk, store], env=env, capture_output=True, text=True,
                          timeout=300)


def _sink_rows(out):
    t = inc.read.parquet_sink(out)
    return sorted(tuple(r.values()) for r in t.to_pylist())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The never-crashed run's output, per provider."""
    refs = {}
    for store in STORES:
        d = tmp_path_factory.mktemp(f"ref-{store}")
        _write_clicks(str(d / "src"))
        r = _run_job(str(d / "src"), str(d / "out"), str(d / "chk"), store)
        assert r.returncode == 0, r.stderr
        refs[store] = _sink_rows(str(d / "out"))
    return refs


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("crash", ["1:process", "3:write", "2:commit"])
def test_crash_and_replay_give_the_never_crashed_output(store, crash, reference, tmp_path):
    src, out, chk = str(tmp_path / "src"), str(tmp_path / "out"), str(tmp_path / "chk")
    _write_clicks(src)
    r = _run_job(src, out, chk, store, crash=crash)
    assert r.returncode == -9, (r.returncode, r.stderr[-2000:])
    r = _run_job(src, out, chk, store)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _sink_rows(out) == reference[store]
    closed = sorted((row[0], row[4]) for row in reference[store] if row[1] == "closed")
    assert closed == [("u1", 3), ("u2", 2), ("u3", 2), ("u4", 2)]


def test_reference_output_is_the_same_on_both_providers(reference):
    assert reference["rocksdb"] == reference["memory"]


@pytest.mark.parametrize("script", ["session_tracker.py", "fraud_counter.py"])
def test_examples_run(script, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "alice" in r.stdout or "'alert': True" in r.stdout


# --- batch by batch against Spark 4.3 ------------------------------------------------------------
# Expectations below were observed on Apache Spark 4.3.0 (PySpark Row-based transformWithState,
# RocksDB state store, local[2], 2 shuffle partitions) with the same processors and files:
# JSON file source, maxFilesPerTrigger=1, trigger(availableNow=True), foreachBatch collecting rows.
# Per batch: output rows (multiset), watermark, num_input_rows and the state operator's
# num_rows_total / num_rows_updated / num_rows_removed / num_rows_dropped_by_watermark.
T0 = ms(0)


def run_files(tmp_path, batches, schema, build, store="rocksdb", mode="append"):
    src = tmp_path / "src"
    src.mkdir()
    for i, rows in enumerate(batches):
        with open(src / f"part-{i:03d}.json", "w") as f:
            for r in rows:
                r = dict(r)
                if "ts" in r:
                    r["ts"] = ts(r["ts"]).isoformat()
                f.write(json.dumps(r) + "\n")
    got = {}
    frame = build(inc.read_stream.files(str(src), "json", schema, max_files_per_trigger=1))
    q = (frame.write_stream.output_mode(mode).checkpoint_location(str(tmp_path / "chk")).option("state_store", store)
         .option("state_partitions", 2).foreach_batch(lambda t, b: got.__setitem__(b, t.to_pylist()))
         .trigger(available_now=True).start())
    q.await_termination()
    assert q.exception() is None
    out = []
    for p in q.recent_progress:
        so = p["state_operators"][0]
        out.append({"batch": p["batch_id"], "wm": p["event_time"].get("watermark"), "in": p["num_input_rows"],
                    "rows": sorted(got.get(p["batch_id"], []), key=lambda r: json.dumps(r, sort_keys=True)),
                    "state": [so[k] for k in ("num_rows_total", "num_rows_updated", "num_rows_removed",
                                              "num_rows_dropped_by_watermark")],
                    "op": so["operator_name"], "custom": so["custom_metrics"]})
    return out


def _srt(rows):
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


class SparkAllKinds(AllKinds):
    def handle_input_rows(self, key, rows, timer_values):
        for user, n, items, totals, has_items, has_a in super().handle_input_rows(key, rows, timer_values):
            yield {"user": user, "n": n, "items": items, "totals": totals, "has_items": has_items, "has_a": has_a}


@pytest.mark.parametrize("store", STORES)
def test_spark_value_list_and_map_state_per_batch(store, tmp_path):
    files = [[{"user": "u1", "item": "a", "qty": 1}, {"user": "u1", "item": "b", "qty": 2},
              {"user": "u2", "item": "a", "qty": 5}],
             [{"user": "u1", "item": "a", "qty": 3}, {"user": "u2", "item": "drop", "qty": 0}],
             [{"user": "u1", "item": "reset", "qty": 0}, {"user": "u3", "item": "c", "qty": 1}]]
    out = "user STRING, n BIGINT, items STRING, totals STRING, has_items BOOLEAN, has_a BOOLEAN"
    got = run_files(tmp_path, files, "user STRING, item STRING, qty BIGINT",
                    lambda s: s.group_by("user").transform_with_state(SparkAllKinds(), out), store)

    def row(u, n, items, totals, hi, ha):
        return {"user": u, "n": n, "items": items, "totals": totals, "has_items": hi, "has_a": ha}
    assert [(b["batch"], b["wm"], b["in"], b["rows"], b["state"]) for b in got] == [
        (0, None, 3, _srt([row("u1", 2, "a:1,b:2", "a=1,b=2", True, True), row("u2", 1, "a:5", "a=5", True, True)]),
         [7, 8, 0, 0]),
        (1, None, 2, _srt([row("u2", 2, "a:5", "", True, False), row("u1", 3, "a:1,b:2,a:3", "a=4,b=2", True, True)]),
         [6, 4, 1, 0]),
        # list clear counts its 3 elements, map clear its 2 entries
        (2, None, 2, _srt([row("u1", 4, "", "", False, False), row("u3", 1, "c:1", "c=1", True, False)]),
         [6, 4, 5, 0]),
    ]
    assert {b["op"] for b in got} == {"transformWithStateInPySparkExec"}


class SparkIdleAlarm(inc.StatefulProcessor):
    """Last event per key; an event-time timer at last + 10 s emits 'idle' (times in s from ts(0))."""

    def init(self, handle):
        self.h = handle
        self.last = handle.get_value_state("last", "t BIGINT")

    def handle_input_rows(self, key, rows, timer_values):
        t = max(int(r["ts"].timestamp() * 1000) for r in rows)
        prev = self.last.get()
        if prev:
            self.h.delete_timer(prev.t + 10_000)
        self.last.update((t,))
        self.h.register_timer(t + 10_000)
        yield {"k": key[0], "what": "seen", "at": (t - T0) // 1000,
               "wm": (timer_values.get_current_watermark_in_ms() - T0) // 1000}

    def handle_expired_timer(self, key, timer_values, expired_timer_info):
        self.last.clear()
        yield {"k": key[0], "what": "idle", "at": (expired_timer_info.get_expiry_time_in_ms() - T0) // 1000,
               "wm": (timer_values.get_current_watermark_in_ms() - T0) // 1000}


@pytest.mark.parametrize("store", STORES)
def test_spark_event_time_timers_per_batch(store, tmp_path):
    files = [[{"k": "a", "ts": 0}, {"k": "b", "ts": 3}],      # timers a@10, b@13
             [{"k": "b", "ts": 12}, {"k": "a", "ts": 1}],     # moved: b@22, a@11
             [{"k": "c", "ts": 20}],                          # c@30; W_2 = 7 s: nothing fires
             [{"k": "a", "ts": 2}, {"k": "c", "ts": 40}],     # a@2 <= W_2 = 7 s: late; W_3 = 15: a@11 fires
             [{"k": "z", "ts": 100}],                         # W_4 = 35: b@22 fires
             [{"k": "e", "ts": 41}, {"k": "y", "ts": 130}]]   # e@41 > W_4 = 35 accepted; W_5 = 95: c@50, e@51 fire
    got = run_files(tmp_path, files, "k STRING, ts TIMESTAMP",
                    lambda s: s.with_watermark("ts", "5 seconds").group_by("k")
                    .transform_with_state(SparkIdleAlarm(), "k STRING, what STRING, at BIGINT, wm BIGINT",
                                          time_mode="event_time"), store)

    def r(k, what, at, wm):
        return {"k": k, "what": what, "at": at, "wm": wm}
    epoch = -T0 // 1000
    assert [(b["batch"], b["wm"], b["in"], b["rows"], b["state"]) for b in got] == [
        (0, "1970-01-01T00:00:00.000Z", 2, _srt([r("a", "seen", 0, epoch), r("b", "seen", 3, epoch)]), [2, 2, 0, 0]),
        (1, "2023-12-31T23:59:58.000Z", 2, _srt([r("a", "seen", 1, -2), r("b", "seen", 12, -2)]), [2, 2, 0, 0]),
        (2, "2024-01-01T00:00:07.000Z", 1, [r("c", "seen", 20, 7)], [3, 1, 0, 0]),
        (3, "2024-01-01T00:00:15.000Z", 2, _srt([r("a", "idle", 11, 15), r("c", "seen", 40, 15)]), [2, 1, 1, 1]),
        (4, "2024-01-01T00:00:35.000Z", 1, _srt([r("z", "seen", 100, 35), r("b", "idle", 22, 35)]), [2, 1, 1, 0]),
        (5, "2024-01-01T00:01:35.000Z", 2, _srt([r("y", "seen", 130, 95), r("e", "seen", 41, 95),
                                                 r("c", "idle", 50, 95), r("e", "idle", 51, 95)]), [2, 2, 2, 0]),
        (6, "2024-01-01T00:02:05.000Z", 0, [r("z", "idle", 110, 125)], [1, 0, 1, 0]),   # trailing no-data batch
    ]
    # Spark counts a fired timer as deleted (its numExpiredTimers stays 0 in 4.3; ours counts them)
    assert [(b["custom"].get("num_registered_timers", 0), b["custom"].get("num_deleted_timers", 0)) for b in got] == [
        (2, 0), (2, 2), (1, 0), (1, 2), (1, 1), (2, 2), (0, 1)]


class SparkCount(inc.StatefulProcessor):
    def init(self, handle):
        self.n = handle.get_value_state("n", "n BIGINT")

    def handle_input_rows(self, key, rows, timer_values):
        n = (self.n.get() or (0,))[0] + sum(1 for _ in rows)
        self.n.update((n,))
        yield {"k": key[0], "n": n, "wm": timer_values.get_current_watermark_in_ms(),
               "pt": timer_values.get_current_processing_time_in_ms() > 0}


@pytest.mark.parametrize("time_mode", [None, "processing_time", "event_time"])
def test_spark_late_rows_and_trailing_batch_by_time_mode(time_mode, tmp_path):
    """Only event_time mode drops late rows; every mode runs the trailing no-data batch (Spark 4.3 in
    processing_time mode goes on running no-data batches forever under available_now: increments
    stops after this one); TimerValues give -1 for both times when time_mode is None."""
    files = [[{"k": "a", "ts": 10}], [{"k": "a", "ts": 20}, {"k": "b", "ts": 3}], [{"k": "a", "ts": 5}, {"k": "b", "ts": 30}]]
    got = run_files(tmp_path, files, "k STRING, ts TIMESTAMP",
                    lambda s: s.with_watermark("ts", "5 seconds").group_by("k")
                    .transform_with_state(SparkCount(), "k STRING, n BIGINT, wm BIGINT, pt BOOLEAN",
                                          time_mode=time_mode, output_mode="update"), mode="update")
    et, timed = time_mode == "event_time", time_mode is not None

    def r(k, n, wm):
        return {"k": k, "n": n, "wm": (T0 + wm * 1000 if wm else 0) if timed else -1, "pt": timed}
    last = [r("b", 2, 15)] if et else [r("a", 3, 15), r("b", 2, 15)]     # a@5 <= W_1 = 5 s is late
    assert [(b["batch"], b["wm"], b["in"], b["rows"], b["state"]) for b in got] == [
        (0, "1970-01-01T00:00:00.000Z", 1, [r("a", 1, 0)], [1, 1, 0, 0]),
        (1, "2024-01-01T00:00:05.000Z", 2, _srt([r("a", 2, 5), r("b", 1, 5)]), [2, 2, 0, 0]),
        (2, "2024-01-01T00:00:15.000Z", 2, _srt(last), [2, len(last), 0, int(et)]),
        (3, "2024-01-01T00:00:25.000Z", 0, [], [2, 0, 0, 0]),
    ]


class SparkChain(inc.StatefulProcessor):
    """List put/append, and an expired-timer handler that registers a new timer already behind the
    watermark: Spark fires it in the next batch, not in the same firing pass."""

    def init(self, handle):
        self.h = handle
        self.lst = handle.get_list_state("l", "x BIGINT")

    def handle_input_rows(self, key, rows, timer_values):
        xs = [int(r["ts"].timestamp()) - T0 // 1000 for r in rows]
        self.lst.put([(x,) for x in sorted(xs)])
        self.h.register_timer(T0 + max(xs) * 1000 + 1000)
        yield {"k": key[0], "what": "in", "v": ",".join(str(t.x) for t in self.lst.get())}

    def handle_expired_timer(self, key, timer_values, expired_timer_info):
        e = (expired_timer_info.get_expiry_time_in_ms() - T0) // 1000
        if e < 5:
            self.h.register_timer(T0 + (e + 1) * 1000)
        self.lst.append_value((e,))
        yield {"k": key[0], "what": "fire", "v": f"{e}:{','.join(str(t.x) for t in self.lst.get())}"}


def test_spark_timer_registered_while_firing_waits_for_the_next_batch(tmp_path):
    files = [[{"k": "a", "ts": 1}, {"k": "a", "ts": 0}], [{"k": "b", "ts": 60}], [{"k": "b", "ts": 61}]]
    got = run_files(tmp_path, files, "k STRING, ts TIMESTAMP",
                    lambda s: s.with_watermark("ts", "5 seconds").group_by("k")
                    .transform_with_state(SparkChain(), "k STRING, what STRING, v STRING", time_mode="event_time"))
    assert [(b["batch"], b["wm"], b["in"], b["rows"], b["state"]) for b in got] == [
        (0, "1970-01-01T00:00:00.000Z", 2, [{"k": "a", "what": "in", "v": "0,1"}], [1, 2, 0, 0]),
        (1, "2023-12-31T23:59:56.000Z", 1, [{"k": "b", "what": "in", "v": "60"}], [2, 1, 0, 0]),
        (2, "2024-01-01T00:00:55.000Z", 1, _srt([{"k": "a", "what": "fire", "v": "2:0,1,2"},
                                                 {"k": "b", "what": "in", "v": "61"}]), [2, 2, 0, 0]),
        # the trailing batch fires a@3 (registered in batch 2 behind W=55); a@4 and b@62 never fire
        (3, "2024-01-01T00:00:56.000Z", 0, [{"k": "a", "what": "fire", "v": "3:0,1,2,3"}], [2, 1, 0, 0]),
    ]


class SparkLongTtl(inc.StatefulProcessor):
    """Value, list and map state with a 1-hour TTL (never expires here), two grouping columns."""

    def init(self, handle):
        self.v = handle.get_value_state("v", "n BIGINT", 3600_000)
        self.lst = handle.get_list_state("l", "x BIGINT", 3600_000)
        self.m = handle.get_map_state("m", "mk STRING", "x BIGINT", 3600_000)

    def handle_input_rows(self, key, rows, timer_values):
        rows = list(rows)
        n = (self.v.get() or (0,))[0] + len(rows)
        self.v.update((n,))
        for r in rows:
            self.lst.append_value((1,))
            self.m.update_value((r["m"],), (1,))
        yield {"k1": key[0], "k2": key[1], "n": n, "l": len(list(self.lst.get())), "m": len(list(self.m.keys()))}


def test_spark_ttl_state_and_two_key_columns(tmp_path):
    """TTL index rows are not state rows (num_rows_total); TTL'd variables are counted apart. Spark
    4.3 then runs no-data batches without end (processing_time + available_now); increments stops."""
    files = [[{"k1": "a", "k2": 1, "m": "x"}, {"k1": "a", "k2": 1, "m": "y"}, {"k1": "a", "k2": 2, "m": "x"}],
             [{"k1": "a", "k2": 1, "m": "x"}], [{"k1": "b", "k2": 1, "m": "z"}]]
    got = run_files(tmp_path, files, "k1 STRING, k2 BIGINT, m STRING",
                    lambda s: s.group_by("k1", "k2").transform_with_state(
                        SparkLongTtl(), "k1 STRING, k2 BIGINT, n BIGINT, l BIGINT, m BIGINT",
                        time_mode="processing_time", output_mode="update"), mode="update")

    def r(k1, k2, n, lst, m):
        return {"k1": k1, "k2": k2, "n": n, "l": lst, "m": m}
    assert [(b["batch"], b["in"], b["rows"], b["state"]) for b in got] == [
        (0, 3, _srt([r("a", 1, 2, 2, 2), r("a", 2, 1, 1, 1)]), [7, 8, 0, 0]),
        (1, 1, [r("a", 1, 3, 3, 2)], [7, 3, 0, 0]),
        (2, 1, [r("b", 1, 1, 1, 1)], [10, 3, 0, 0]),
    ]
    assert {k: v for k, v in got[0]["custom"].items() if k.endswith("_vars") and v} == {
        "num_value_state_with_ttl_vars": 2, "num_list_state_with_ttl_vars": 2, "num_map_state_with_ttl_vars": 2}

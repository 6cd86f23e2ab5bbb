"""The increments side of the chained-operator and union scenarios (chain_scenarios.py): the same
queries as docs/spark/record_chain.py builds with PySpark, run through the public API with
trigger(available_now=True) into a memory sink."""
from __future__ import annotations

import datetime as dt
import uuid

import increments as inc
from increments import functions as F
from jsonl_testutil import write_files

from chain_scenarios import COND, SCENARIOS


def sources(tmp, name: str) -> dict:
    out = {}
    for s, (schema, wm, files) in SCENARIOS[name]["sources"].items():
        d = write_files(str(tmp / name / s), files)
        f = inc.read_stream.files(d, "json", schema, max_files_per_trigger=1)
        out[s] = f.with_watermark(*wm) if wm else f
    return out


def query(name, src):
    name = SCENARIOS[name].get("query", name)
    W = F.window
    if name in ("union_agg", "union_agg_max"):
        return src["a"].union(src["b"]).group_by(W("ts", "10 minutes")).count()
    if name == "union_by_name_agg":
        u = src["a"].union_by_name(src["b"], allow_missing_columns=True)
        return u.group_by(W("ts", "10 minutes"), "k").agg(F.count(), F.sum("v"))
    if name == "window_of_windows":
        w1 = src["a"].group_by(W("ts", "10 minutes"), "k").count()
        return w1.group_by(W(F.window_time("window"), "30 minutes")).agg(F.sum("count").alias("total"),
                                                                        F.count().alias("n"))
    if name == "dedup_agg":
        return src["a"].drop_duplicates(["k", "ts"]).group_by(W("ts", "10 minutes")).count()
    if name == "dedup_within_wm_agg":
        return src["a"].drop_duplicates_within_watermark(["k"]).group_by(W("ts", "10 minutes")).count()
    if name == "join_agg":
        j = src["i"].alias("i").join(src["c"].alias("c"), COND)
        return j.group_by(W("click_time", "30 minutes")).count()
    if name == "left_join_agg":
        j = src["i"].alias("i").join(src["c"].alias("c"), COND, "left_outer")
        return j.group_by(W("imp_time", "30 minutes")).agg(F.count(), F.count("click_id").alias("clicks"))
    if name == "join_agg_imp_time":
        j = src["i"].alias("i").join(src["c"].alias("c"), COND)
        return j.group_by(W("imp_time", "30 minutes")).agg(F.count(), F.max("click_id").alias("last_click"))
    if name == "agg_left_join":
        ia = src["i"].group_by(W("imp_time", "30 minutes"), "ad_id").agg(F.count().alias("imps"))
        ca = src["c"].group_by(W("click_time", "30 minutes"), "ad_id").agg(F.count().alias("clicks"))
        return ia.join(ca, ["window", "ad_id"], "left_outer")
    if name in ("window_of_window_struct",):
        w1 = src["a"].group_by(W("ts", "10 minutes"), "k").count()
        return w1.group_by(W("window", "30 minutes")).agg(F.sum("count").alias("total"))
    if name == "window_of_windows_update":
        w1 = src["a"].group_by(W("ts", "10 minutes"), "k").count()
        return w1.group_by(W(F.window_time("window"), "30 minutes")).agg(F.sum("count").alias("total"))
    if name == "union_dedup_agg":
        u = src["a"].union(src["b"]).drop_duplicates(["k", "ts"])
        return u.group_by(W("ts", "10 minutes"), "k").count()
    if name == "session_then_window":
        s1 = src["a"].group_by(F.session_window("ts", "5 minutes"), "k").count()
        return s1.group_by(W(F.window_time("session_window"), "30 minutes")).agg(F.sum("count").alias("total"))
    if name == "union_join":
        clicks = src["c"].union(src["d"])
        j = src["i"].alias("i").join(clicks.alias("c"), COND)
        return j.select("imp_id", "click_id", "click_time")
    if name == "join_only":
        return src["i"].alias("i").join(src["c"].alias("c"), COND).select("imp_id", "click_id")
    if name == "agg_join":
        ia = src["i"].group_by(W("imp_time", "30 minutes"), "ad_id").agg(F.count().alias("imps"))
        ca = src["c"].group_by(W("click_time", "30 minutes"), "ad_id").agg(F.count().alias("clicks"))
        return ia.join(ca, ["window", "ad_id"])
    raise KeyError(name)


def norm(v):
    if isinstance(v, dt.datetime):
        v = v.astimezone(dt.timezone.utc)
        s = v.strftime("%Y-%m-%d %H:%M:%S")
        return s + (f".{v.microsecond:06d}" if v.microsecond else "")
    if isinstance(v, dict):
        return tuple(norm(x) for x in v.values())
    return v


def run(tmp, name: str, state_store: str = "memory"):
    """({batch id: sorted row tuples}, progress list) of the scenario through increments."""
    frame = query(name, sources(tmp, name))
    qname = "chain_" + uuid.uuid4().hex[:8]
    w = (frame.write_stream.format("memory").query_name(qname).output_mode(SCENARIOS[name].get("output_mode", "append")).trigger(available_now=True)
         .checkpoint_location(str(tmp / ("chk_" + qname))).option("state_store", state_store))
    for k, v in (SCENARIOS[name].get("options") or {}).items():
        w = w.option(k, v)
    q = w.start()
    q.await_termination()
    batches = {b: sorted((tuple(norm(v) for v in r.values()) for r in t.to_pylist()), key=repr)
               for b, t in sorted(inc.memory_batches(qname).items())}
    return batches, q.recent_progress, frame.schema.names

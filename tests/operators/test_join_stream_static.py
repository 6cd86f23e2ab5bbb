"""Stream-static joins: stateless enrichment against a pyarrow Table, inc.read.files(...) and
inc.read.delta(path) (re-read every batch: a dimension update shows in the next batch without a
restart). Inner, left outer (stream side preserved), left semi; no state, no trailing batch."""
from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from deltalake import write_deltalake

import increments as inc
from join_testutil import CLICKS, CLICK_SCHEMA, ts, write_files

ADS = pa.table({"ad_id": pa.array([1, 4, 9], pa.int64()), "campaign": ["a", "b", "c"]})


def _clicks(tmp, watermark=True):
    cdir = write_files(str(tmp / "clicks"),
                       [[{"click_id": a, "ad_id": b, "click_time": ts(t)} for a, b, t in f] for f in CLICKS])
    c = inc.read_stream.files(cdir, "json", CLICK_SCHEMA, max_files_per_trigger=1)
    return c.with_watermark("click_time", "10 minutes") if watermark else c


def _run(frame, tmp, foreach=None):
    name = "ss_" + uuid.uuid4().hex[:8]
    out: dict[int, list] = {}

    def fb(table, batch_id):
        out[batch_id] = table.to_pylist()
        if foreach:
            foreach(batch_id)
    q = (frame.write_stream.foreach_batch(fb).query_name(name).trigger(available_now=True)
         .checkpoint_location(str(tmp / ("chk_" + name))).start())
    q.await_termination()
    return out, q.recent_progress


def test_inner_with_arrow_table_and_no_trailing_batch(tmp_path):
    out, progress = _run(_clicks(tmp_path).join(ADS, ["ad_id"]), tmp_path)
    assert sorted(out) == [0, 1, 2, 3]                         # stream-static: no trailing batch
    assert {b: {(r["click_id"], r["campaign"]) for r in rows} for b, rows in out.items()} == {
        0: {("c1", "a")}, 1: {("c9", "c"), ("c1b", "a")}, 2: {("c4", "b"), ("cL", "a")}, 3: set()}
    # late rows are not dropped by a stateless join (cL is behind the watermark in batch 2)
    assert list(out[0][0]) == ["ad_id", "click_id", "click_time", "campaign"]
    assert all(p["state_operators"] == [] for p in progress)


def test_left_outer_keeps_every_stream_row(tmp_path):
    clicks = _clicks(tmp_path, watermark=False).alias("c")
    q = clicks.join(ADS.rename_columns(["id", "campaign"]), "c.ad_id = id", "left_outer").select(
        "c.click_id", "campaign")
    out, _ = _run(q, tmp_path)
    assert {(r["click_id"], r["campaign"]) for r in out[2]} == {("c4", "b"), ("c5", None), ("cL", "a"), ("c6", None)}
    assert sum(len(v) for v in out.values()) == sum(len(f) for f in CLICKS)


def test_left_semi(tmp_path):
    out, _ = _run(_clicks(tmp_path).join(ADS, ["ad_id"], "left_semi"), tmp_path)
    assert {r["click_id"] for r in out[1]} == {"c9", "c1b"}
    assert list(out[1][0]) == ["click_id", "ad_id", "click_time"]


def test_static_files_side(tmp_path):
    d = tmp_path / "dim"
    d.mkdir()
    (d / "ads.csv").write_text("1,a\n9,c\n")
    static = inc.read.files(str(d), "csv", "ad_id BIGINT, campaign STRING")
    out, _ = _run(_clicks(tmp_path).join(static, ["ad_id"]), tmp_path)
    assert {(r["click_id"], r["campaign"]) for r in out[1]} == {("c9", "c"), ("c1b", "a")}


def test_delta_side_is_reread_every_batch(tmp_path):
    path = str(tmp_path / "ads_delta")
    write_deltalake(path, ADS)

    def update(batch_id):  # after batch 0 is written, the dimension changes: ad 1 moves to campaign "z"
        if batch_id == 0:
            write_deltalake(path, pa.table({"ad_id": pa.array([1, 4, 9, 8], pa.int64()),
                                            "campaign": ["z", "b", "c", "d"]}), mode="overwrite")
    out, _ = _run(_clicks(tmp_path).alias("c").join(inc.read.delta(path), ["ad_id"], "left_outer")
                  .select("c.click_id", "campaign"), tmp_path, foreach=update)
    assert {(r["click_id"], r["campaign"]) for r in out[0]} == {("c1", "a")}
    assert {(r["click_id"], r["campaign"]) for r in out[1]} == {("c9", "c"), ("c1b", "z"), ("c8", "d")}


@pytest.mark.parametrize("how", ["right_outer", "full_outer"])
def test_outer_on_the_static_side_is_refused(tmp_path, how):
    with pytest.raises(inc.AnalysisException, match="static table"):
        _run(_clicks(tmp_path).join(ADS, ["ad_id"], how), tmp_path)

"""Does a year of one-minute batches keep Dagster light? A synthetic instance (issue 29, item 2).

    .venv/bin/python bench/dagster_history_scale.py [--small 1000] [--large 200000] [--rounds 15]

Two Dagster instances on PostgreSQL (fresh databases) and one query (files -> parquet) whose two
batches really run (execute_in_process on the small instance): the last one is the template. The
instances are grown to --small and to --large past batches with rows made directly in storage
(COPY into runs, run_tags, event_logs and asset_check_executions: per batch the run, its tags, its
asset events -- the sink's materialization, its planned event, five check evaluations -- and five
check executions, at one-minute spacing back in time; the ~43 step and log events a batch run also
writes are not copied: only their run's page reads them, through the run_id index), then ANALYZE.
Then, the two instances measured alternately in each round, the medians of:
    sensor tick          the query's trigger sensor evaluated (orchestration/sensors.py: the
                         in-flight, last-run and halt queries, then the log: no new data)
    latest mat.          instance.fetch_materializations(sink, limit=1) (the asset page)
    latest check         the batch_errors check's latest execution
    find batch N         the run tagged increments/batch_id=N (runs list filter, one query), then
                         its materialization by run id
    runs page            the query's newest 25 runs (runs list filtered by increments/query)
Prints each at both sizes and the ratio large/small (goal: <= 1, within noise), with the load
average; at the large size the latest check execution once more after the retention job's index
(orchestration/dagster_internals.py CHECK_INDEX; the small size's figure is without it). The
database is dropped at the end (--keep keeps it for EXPLAIN).
"""
from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "orchestration"))
from orch_testutil import create_db, drop_db  # noqa: E402  (PostgreSQL at $INCREMENTS_TEST_PG)


def write_file(root: str, i: int, rows: int = 100) -> None:
    d = os.path.join(root, "landing")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f-{i:04d}.json"), "w") as f:
        for r in range(rows):
            f.write(json.dumps({"id": i * rows + r, "name": f"n{r}"}) + "\n")


def make_query(root: str):
    import increments as inc

    def hist_copy():
        return (inc.read_stream.files(os.path.join(root, "landing"), format="json", schema="id BIGINT, name STRING",
                                      max_files_per_trigger=1)
                .write_stream.format("parquet").checkpoint_location(os.path.join(root, "chk"))
                .query_name("hist_copy").trigger(processing_time="1 minute"))
    return hist_copy


class Template:
    """The last real batch run's rows, to be copied with a new run id and batch id."""

    def __init__(self, conn, run_id: str, batch_id: int):
        self.run_id, self.batch_id = run_id, batch_id
        cur = conn.cursor()
        cur.execute("SELECT snapshot_id, pipeline_name, mode, status, run_body FROM runs WHERE run_id = %s", (run_id,))
        self.run = cur.fetchone()
        cur.execute("SELECT snapshot_id, snapshot_body, snapshot_type FROM snapshots")
        self.snapshots = cur.fetchall()          # the job and plan snapshots the runs name
        cur.execute("SELECT key, value FROM run_tags WHERE run_id = %s", (run_id,))
        self.tags = cur.fetchall()
        cur.execute("SELECT event, dagster_event_type, step_key, asset_key, partition FROM event_logs WHERE run_id = %s "
                    "AND dagster_event_type IN ('ASSET_MATERIALIZATION', 'ASSET_MATERIALIZATION_PLANNED', "
                    "'ASSET_CHECK_EVALUATION') ORDER BY id", (run_id,))
        self.events = cur.fetchall()
        cur.execute("SELECT asset_key, check_name, partition, execution_status, evaluation_event FROM "
                    "asset_check_executions WHERE run_id = %s", (run_id,))
        self.checks = cur.fetchall()

    def text(self, s: str | None, run_id: str, batch: int) -> str | None:
        if s is None:
            return None
        b = str(self.batch_id)
        return (s.replace(self.run_id, run_id)
                .replace(f'"increments/batch_id": "{b}"', f'"increments/batch_id": "{batch}"')
                .replace(f'"text": "{b}"}}, "label": "batch_id"', f'"text": "{batch}"}}, "label": "batch_id"'))


def grow(dsn: str, tpl: Template, start: int, stop: int, t0: float) -> None:
    """Copy the template as batches start .. stop-1, batch b at t0 + 60 b seconds."""
    import psycopg

    def ts(b: int, off: float = 0.0) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(t0 + 60 * b + off, datetime.timezone.utc).replace(tzinfo=None)

    ids = {b: str(uuid.uuid4()) for b in range(start, stop)}
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        for snap in tpl.snapshots:
            cur.execute("INSERT INTO snapshots (snapshot_id, snapshot_body, snapshot_type) VALUES (%s, %s, %s) "
                        "ON CONFLICT DO NOTHING", snap)
        with cur.copy("COPY runs (run_id, snapshot_id, pipeline_name, mode, status, run_body, create_timestamp, "
                      "update_timestamp, start_time, end_time) FROM STDIN") as cp:
            snap, job, mode, status, body = tpl.run
            for b, rid in ids.items():
                cp.write_row((rid, snap, job, mode, status, tpl.text(body, rid, b), ts(b), ts(b, 4), t0 + 60 * b + 1,
                              t0 + 60 * b + 4))
        with cur.copy("COPY run_tags (run_id, key, value) FROM STDIN") as cp:
            for b, rid in ids.items():
                for k, v in tpl.tags:
                    cp.write_row((rid, k, str(b) if k == "increments/batch_id" else v))
        with cur.copy("COPY event_logs (run_id, event, dagster_event_type, timestamp, step_key, asset_key, partition) "
                      "FROM STDIN") as cp:
            for b, rid in ids.items():
                for ev, typ, step, key, part in tpl.events:
                    cp.write_row((rid, tpl.text(ev, rid, b), typ, ts(b, 3), step, key, part))
        with cur.copy("COPY asset_check_executions (asset_key, check_name, partition, run_id, execution_status, "
                      "evaluation_event, evaluation_event_timestamp, create_timestamp) FROM STDIN") as cp:
            for b, rid in ids.items():
                for key, name, part, st, ev in tpl.checks:
                    cp.write_row((key, name, part, rid, st, tpl.text(ev, rid, b), ts(b, 3), ts(b, 3)))
        conn.commit()
        conn.autocommit = True
        for t in ("runs", "run_tags", "event_logs", "asset_check_executions"):
            cur.execute(f"ANALYZE {t}")


def measure(inst, defs, spec_name: str, sink, batch: int) -> dict[str, float]:
    """One round on one instance: seconds per operation."""
    import dagster as dg

    from orchestration.ops import BATCH_TAG, QUERY_TAG
    out = {}
    sensor = defs.get_sensor_def(f"{spec_name}_trigger")
    t = time.perf_counter()
    res = sensor(dg.build_sensor_context(instance=inst))
    out["sensor tick"] = time.perf_counter() - t
    assert isinstance(res, dg.SkipReason) and "no new data" in (res.skip_message or ""), res
    t = time.perf_counter()
    inst.fetch_materializations(sink, limit=1)
    out["latest materialization"] = time.perf_counter() - t
    t = time.perf_counter()
    key = dg.AssetCheckKey(sink, "batch_errors")
    inst.event_log_storage.get_latest_asset_check_execution_by_key([key])
    out["latest check execution"] = time.perf_counter() - t
    t = time.perf_counter()
    recs = inst.get_run_records(dg.RunsFilter(tags={QUERY_TAG: spec_name, BATCH_TAG: str(batch)}), limit=1)
    mats = inst.get_records_for_run(recs[0].dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    out["find batch N (run + materialization)"] = time.perf_counter() - t
    assert recs and mats and recs[0].dagster_run.tags[BATCH_TAG] == str(batch)
    t = time.perf_counter()
    inst.get_run_records(dg.RunsFilter(tags={QUERY_TAG: spec_name}), limit=25)
    out["runs page (25, by query tag)"] = time.perf_counter() - t
    return out


def bench(instances: dict[int, Any], defs, sink, rounds: int, keys: dict[str, str] | None = None
          ) -> dict[int, dict[str, float]]:
    """Medians per size, the sizes measured alternately in each round (one warm-up round first)."""
    samples: dict[int, dict[str, list[float]]] = {n: {} for n in instances}
    for r in range(rounds + 1):
        for n, inst in instances.items():
            got = measure(inst, defs, "hist_copy", sink, batch=(r * 7919) % n)
            for k, v in got.items():
                if r:
                    samples[n].setdefault((keys or {}).get(k, k), []).append(v)
    return {n: {k: statistics.median(v) for k, v in by.items()} for n, by in samples.items()}


def main() -> int:
    import warnings
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--keep", action="store_true", help="keep the databases (printed) for EXPLAIN")
    args = ap.parse_args()
    import dagster as dg
    import psycopg

    from orchestration import build_definitions
    from orchestration.dagster_internals import ensure_storage_indexes
    root = tempfile.mkdtemp(prefix="inc_hist_")
    dbs, instances, dsns = {}, {}, {}
    try:
        for n in (args.small, args.large):         # one instance per size, same query, same template
            name, url = create_db("inc_hist")
            dbs[n] = name
            home = os.path.join(root, f"home{n}")
            os.makedirs(home)
            with open(os.path.join(home, "dagster.yaml"), "w") as f:
                f.write("storage:\n  postgres:\n    postgres_url: "
                        + url.replace("postgresql+psycopg://", "postgresql+psycopg2://") + "\ntelemetry:\n  enabled: false\n")
            dsns[n] = url.replace("postgresql+psycopg://", "postgresql://")
            instances[n] = dg.DagsterInstance.from_config(home)
        for i in range(2):
            write_file(root, i)
        q = make_query(root)
        defs = build_definitions([(q, {"path": os.path.join(root, "lake"), "sensor_status": "stopped"})], asset_root=root)
        job = defs.get_job_def("hist_copy_batch")
        small = instances[args.small]
        runs = [job.execute_in_process(instance=small).run_id for _ in range(2)]     # the real batches 0 and 1
        sink = dg.AssetKey(["files", "lake"])
        with psycopg.connect(dsns[args.small]) as conn:
            tpl = Template(conn, runs[-1], 1)
        t0 = time.time() - 60 * (args.large + 60)
        for n in instances:
            t = time.perf_counter()
            grow(dsns[n], tpl, 2 if n == args.small else 0, n, t0)
            print(f"# {n} batches in instance {dbs[n]} (grown in {time.perf_counter() - t:.0f} s)", flush=True)
        print(f"# measuring, load {os.getloadavg()[0]:.1f}", flush=True)
        results = bench(instances, defs, sink, args.rounds)
        for n, inst in instances.items():         # the retention job's index on check executions
            ensure_storage_indexes(inst)
            with psycopg.connect(dsns[n], autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE asset_check_executions")
        with_index = bench(instances, defs, sink, args.rounds,
                           {"latest check execution": "latest check execution, with the retention job's index"})
        for n in instances:
            results[n]["latest check execution, with the retention job's index"] = \
                with_index[n]["latest check execution, with the retention job's index"]
        print("| table (large instance) | rows | size |\n|---|---|---|")
        with psycopg.connect(dsns[args.large]) as conn:
            for t in ("runs", "run_tags", "event_logs", "asset_check_executions"):
                rows = conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                size = conn.execute(f"SELECT pg_size_pretty(pg_total_relation_size('{t}'))").fetchone()[0]
                print(f"| {t} | {rows} | {size} |")
        print(f"\n| operation (median of {args.rounds}, alternating) | {args.small} batches | {args.large} batches | ratio |")
        print("|---|---|---|---|")
        for k in results[args.small]:
            a, b = results[args.small][k], results[args.large][k]
            print(f"| {k} | {a * 1000:.1f} ms | {b * 1000:.1f} ms | {b / a:.2f}x |")
        print(f"load average {os.getloadavg()}")
    finally:
        for inst in instances.values():
            inst.dispose()
        for n, name in dbs.items():
            if args.keep:
                print(f"kept {name}")
            else:
                drop_db(name)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The example queries the workspace (workspace.yaml -> orchestration/definitions.py) loads.

Data lives under $INCREMENTS_EXAMPLES_DIR (default examples/data next to this file):
    landing/clicks/*.json   newline-delimited JSON clicks: campaign_id, user_id, event_time
    chk/<query>/            checkpoints (the log is an SQLite file there unless INCREMENTS_LOG_URL is set)
    lake/<query>/           Delta tables (the sinks)
Drop a file into landing/clicks and the `clicks_bronze_trigger` sensor runs a batch (then
`clicks_silver_trigger` reads the new Delta version); launch `hourly_clicks_available_now` (or wait for
its hourly schedule) to drain the clicks into hourly counts. In the asset graph:
files/landing/clicks -> delta/lake/clicks_bronze -> delta/lake/clicks_silver, and
files/landing/clicks -> delta/lake/hourly_clicks (keys relative to ASSET_ROOT).
`python examples/queries.py N` writes N demo files into landing/clicks (standard library only: any
python3 runs it).
"""
from __future__ import annotations

import os

ROOT = os.environ.get("INCREMENTS_EXAMPLES_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
ASSET_ROOT = ROOT
LANDING = os.path.join(ROOT, "landing", "clicks")
SCHEMA = "campaign_id STRING, user_id STRING, event_time TIMESTAMP"
os.makedirs(LANDING, exist_ok=True)


def write_demo_files(n: int = 4, rows: int = 100) -> None:
    import datetime as dt
    import json
    import random
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    existing = len(os.listdir(LANDING))
    for f in range(existing, existing + n):
        tmp = os.path.join(LANDING, f".clicks-{f:05d}.json.tmp")
        with open(tmp, "w") as out:
            for r in range(rows):
                t = start + dt.timedelta(minutes=20 * f + r * 20 / rows)
                out.write(json.dumps({"campaign_id": f"c{random.randint(1, 3)}", "user_id": f"u{r}",
                                      "event_time": t.isoformat()}) + "\n")
        os.replace(tmp, os.path.join(LANDING, f"clicks-{f:05d}.json"))    # a file appears whole


if __name__ == "__main__":          # before the imports below: writing demo files needs no dependencies
    import sys
    write_demo_files(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
    print(f"wrote demo files into {LANDING}")
    raise SystemExit(0)

import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402
from orchestration import streaming_query  # noqa: E402


def _chk(name: str) -> str:
    return os.path.join(ROOT, "chk", name)


def _lake(name: str) -> str:
    return os.path.join(ROOT, "lake", name)


@streaming_query(path=_lake("clicks_bronze"))
def clicks_bronze():
    """Stateless: clicks as they land, typed, one Delta commit per batch (processing-time trigger)."""
    clicks = inc.read_stream.files(LANDING, format="json", schema=SCHEMA, max_files_per_trigger=2)
    return (clicks.filter("campaign_id IS NOT NULL")
            .write_stream.format("delta").output_mode("append")
            .checkpoint_location(_chk("clicks_bronze")).query_name("clicks_bronze")
            .trigger(processing_time="10 seconds"))


@streaming_query(path=_lake("clicks_silver"))
def clicks_silver():
    """Downstream of clicks_bronze: reads its Delta table as a stream, keeps campaigns c1 and c2."""
    bronze = inc.read_stream.delta(_lake("clicks_bronze"))
    return (bronze.filter("campaign_id IN ('c1', 'c2')")
            .write_stream.format("delta").output_mode("append")
            .checkpoint_location(_chk("clicks_silver")).query_name("clicks_silver")
            .trigger(processing_time="10 seconds"))


@streaming_query(path=_lake("hourly_clicks"), cron_schedule="0 * * * *")
def hourly_clicks():
    """Stateful: clicks per campaign and hour, emitted once the watermark closes the hour (AvailableNow)."""
    clicks = inc.read_stream.files(LANDING, format="json", schema=SCHEMA, max_files_per_trigger=2)
    hourly = (clicks.with_watermark("event_time", "15 minutes")
              .group_by(F.window("event_time", "1 hour"), "campaign_id").count())
    return (hourly.write_stream.format("delta").output_mode("append")
            .checkpoint_location(_chk("hourly_clicks")).query_name("hourly_clicks")
            .trigger(available_now=True))

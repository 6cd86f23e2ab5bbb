"""The example queries the workspace (workspace.yaml -> orchestration/definitions.py) loads.

Where they keep everything, from the environment (nothing is written when this module is imported):
    INCREMENTS_EXAMPLES_DIR     the data root: a local directory or an object-store URL
                                (s3://bucket/prefix, gs://..., az://...); default examples/data next to
                                this file (a development checkout; refused when that tree is read-only,
                                as in the deploy image: set the variable there)
    INCREMENTS_CHECKPOINT_ROOT  the checkpoints' root (default <INCREMENTS_EXAMPLES_DIR>/chk)
    INCREMENTS_LOG_URL          the batch log (PostgreSQL); needed when the checkpoints are on object
                                storage (a local checkpoint's log is an SQLite file in it when unset)
Layout under the data root:
    landing/clicks/*.json   newline-delimited JSON clicks: campaign_id, user_id, event_time
    lake/<query>/           Delta tables (the sinks)
    chk/<query>/            checkpoints (unless INCREMENTS_CHECKPOINT_ROOT says otherwise)
Drop a file into landing/clicks and the `clicks_bronze_trigger` sensor runs a batch (then
`clicks_silver_trigger` reads the new Delta version); launch `hourly_clicks_available_now` (or wait for
its hourly schedule) to drain the clicks into hourly counts. In the asset graph:
files/landing/clicks -> delta/lake/clicks_bronze -> delta/lake/clicks_silver, and
files/landing/clicks -> delta/lake/hourly_clicks (keys relative to ASSET_ROOT for local data; an
object-store root keeps scheme and bucket: files/s3/<bucket>/<prefix>/landing/clicks).
The medallion pipeline of examples/medallion.py (customers_bronze, customers_silver with AUTO CDC
and expectations, customers_gold over silver's change feed) is one chain beside them:
files/landing/customers -> delta/lake/customers_bronze -> delta/lake/customers_silver ->
delta/lake/customers_gold (silver's expectations are asset checks on its table); drop change files
into landing/customers (`medallion.write_changes`) and their trigger sensors run the batches.
`python examples/queries.py N` writes N demo files into landing/clicks (a local root: standard
library only, any python3 runs it; an object-store root: through the engine's storage, e.g. in the
deploy image `python examples/queries.py 6`).
"""
from __future__ import annotations

import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_DEFAULT_ROOT = os.path.join(_HERE, "data")


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _join(base: str, *parts: str) -> str:
    if _is_url(base):
        return "/".join([base.rstrip("/"), *parts])
    return os.path.join(base, *parts)


def _writable(path: str) -> bool:
    """Whether `path` (or its nearest existing parent) can be written by this user."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.access(path, os.W_OK)


ROOT = os.environ.get("INCREMENTS_EXAMPLES_DIR") or _DEFAULT_ROOT
CHECKPOINT_ROOT = os.environ.get("INCREMENTS_CHECKPOINT_ROOT") or _join(ROOT, "chk")
ASSET_ROOT = None if _is_url(ROOT) else ROOT
LANDING = _join(ROOT, "landing", "clicks")
SCHEMA = "campaign_id STRING, user_id STRING, event_time TIMESTAMP"


def check_environment() -> None:
    """Refuse, naming the variable to set, a set-up that would write under the package's own tree
    when it is not writable (the deploy image), or keep object-store checkpoints without a log URL."""
    for what, path in (("INCREMENTS_EXAMPLES_DIR", ROOT), ("INCREMENTS_CHECKPOINT_ROOT", CHECKPOINT_ROOT)):
        if not _is_url(path) and not _writable(path):
            raise RuntimeError(
                f"examples.queries: {what} resolves to {path}, which this user (uid {os.getuid()}) cannot write "
                "(a read-only or root-owned tree, such as the deploy image's). Set INCREMENTS_EXAMPLES_DIR to an "
                "object-store URL (s3://bucket/prefix; create the bucket first) and INCREMENTS_LOG_URL to a "
                "PostgreSQL database, or to a directory this user can write.")
    if _is_url(CHECKPOINT_ROOT) and not os.environ.get("INCREMENTS_LOG_URL"):
        raise RuntimeError(
            f"examples.queries: the checkpoints are on object storage ({CHECKPOINT_ROOT}) but INCREMENTS_LOG_URL is "
            "not set; set it to the PostgreSQL database holding the batch log "
            "(postgresql+psycopg://user:password@host:5432/increments; create the database first).")


def write_demo_files(n: int = 4, rows: int = 100) -> None:
    """N more files of `rows` clicks into LANDING, each appearing whole (local: written then renamed;
    object store: one put)."""
    import datetime as dt
    import json
    import random
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    if _is_url(LANDING):
        from increments import storage
        loc = storage.location(LANDING)
        existing = len([o for o in loc.list() if o.name.endswith(".json")])
    else:
        os.makedirs(LANDING, exist_ok=True)
        existing = len([f for f in os.listdir(LANDING) if f.endswith(".json")])
    for f in range(existing, existing + n):
        body = "".join(json.dumps({"campaign_id": f"c{random.randint(1, 3)}", "user_id": f"u{r}",
                                   "event_time": (start + dt.timedelta(minutes=20 * f + r * 20 / rows)).isoformat()})
                       + "\n" for r in range(rows))
        name = f"clicks-{f:05d}.json"
        if _is_url(LANDING):
            loc.write_bytes(name, body.encode())
        else:
            tmp = os.path.join(LANDING, f".{name}.tmp")
            with open(tmp, "w") as out:
                out.write(body)
            os.replace(tmp, os.path.join(LANDING, name))    # a file appears whole


if __name__ == "__main__":          # before the imports below: writing local demo files needs no dependencies
    import sys
    if _is_url(LANDING):
        sys.path.insert(0, os.path.dirname(_HERE))
    write_demo_files(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
    print(f"wrote demo files into {LANDING}")
    raise SystemExit(0)

check_environment()

import increments as inc  # noqa: E402
from increments import functions as F  # noqa: E402
from orchestration import streaming_query  # noqa: E402


def _chk(name: str) -> str:
    return _join(CHECKPOINT_ROOT, name)


def _lake(name: str) -> str:
    return _join(ROOT, "lake", name)


@streaming_query(path=_lake("clicks_bronze"))
def clicks_bronze():
    """Stateless: clicks as they land, typed, one Delta commit per batch (processing-time trigger)."""
    clicks = inc.read_stream.files(LANDING, format="json", schema=SCHEMA, max_files_per_trigger=2,
                                  wait_for_path=True)        # no batch until the first file lands
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
    clicks = inc.read_stream.files(LANDING, format="json", schema=SCHEMA, max_files_per_trigger=2,
                                  wait_for_path=True)        # no batch until the first file lands
    hourly = (clicks.with_watermark("event_time", "15 minutes")
              .group_by(F.window("event_time", "1 hour"), "campaign_id").count())
    return (hourly.write_stream.format("delta").output_mode("append")
            .checkpoint_location(_chk("hourly_clicks")).query_name("hourly_clicks")
            .trigger(available_now=True))


def _medallion():
    try:
        from examples import medallion
    except ImportError:             # loaded as a file (python_file in a workspace), not as a package
        import sys
        sys.path.insert(0, _HERE)
        import medallion
    return medallion


_TEN_S = {"processing_time": "10 seconds"}


@streaming_query(path=_lake("customers_bronze"))
def customers_bronze():
    """examples/medallion.py's bronze: change files as they land -> Delta."""
    return _medallion().bronze(ROOT, _TEN_S, wait_for_path=True).checkpoint_location(_chk("customers_bronze"))


@streaming_query(path=_lake("customers_silver"))
def customers_silver():
    """examples/medallion.py's silver: bronze's Delta table -> expectations -> AUTO CDC SCD type 2."""
    return _medallion().silver(ROOT, _TEN_S).checkpoint_location(_chk("customers_silver"))


@streaming_query(path=_lake("customers_gold"))
def customers_gold():
    """examples/medallion.py's gold: silver's change data feed -> per city counts (complete)."""
    return _medallion().gold(ROOT, _TEN_S).checkpoint_location(_chk("customers_gold"))

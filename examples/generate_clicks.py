"""Generate click events as JSON-lines files (one file = one micro-batch with max_files_per_trigger=1).

Events move forward in time file by file, with a little disorder and a few late clicks, so the
15-minute watermark closes hourly windows as the files are processed.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import random


def generate(out_dir: str, files: int = 6, events_per_file: int = 500, campaigns: int = 4, seed: int = 7,
             start: str = "2026-11-01T08:00:00+00:00", minutes_per_file: int = 40) -> int:
    rnd = random.Random(seed)
    os.makedirs(out_dir, exist_ok=True)
    t0 = dt.datetime.fromisoformat(start)
    total = 0
    for f in range(files):
        base = t0 + dt.timedelta(minutes=f * minutes_per_file)
        path = os.path.join(out_dir, f"clicks-{f:04d}.json")
        with open(path + ".tmp", "w") as fh:
            for _ in range(events_per_file):
                offset_s = rnd.uniform(0, minutes_per_file * 60)
                if rnd.random() < 0.02:
                    offset_s -= rnd.uniform(0, 3 * 3600)  # a late straggler
                t = base + dt.timedelta(seconds=offset_s)
                fh.write(json.dumps({"campaign_id": f"c{rnd.randrange(campaigns)}", "user_id": f"u{rnd.randrange(1000)}",
                                     "event_time": t.isoformat().replace("+00:00", "Z")}) + "\n")
                total += 1
        os.replace(path + ".tmp", path)
    return total

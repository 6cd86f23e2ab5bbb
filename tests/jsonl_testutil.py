"""Test input: one JSON-lines file per micro-batch (name order is batch order)."""
from __future__ import annotations

import json
import os


def write_files(directory: str, batches: list[list[dict]]) -> str:
    """Write batch i's rows to <directory>/part-<i>.json; return the directory."""
    os.makedirs(directory, exist_ok=True)
    for i, rows in enumerate(batches):
        with open(os.path.join(directory, f"part-{i:04d}.json"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return directory

"""Helpers shared by the orchestration tests."""
import json
import os

ROWS_PER_FILE = 50


def write_files(root: str, query: str, n: int, start: int = 0) -> int:
    d = os.path.join(root, "landing", query)
    os.makedirs(d, exist_ok=True)
    for f in range(start, start + n):
        with open(os.path.join(d, f"part-{f:04d}.json"), "w") as out:
            for r in range(ROWS_PER_FILE):
                out.write(json.dumps({"id": f * 1000 + r, "name": f"{query}-{f}-{r}"}) + "\n")
    return n * ROWS_PER_FILE

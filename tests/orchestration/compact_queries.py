"""The Delta-sink query of the compaction tests, and a runner for it as a subprocess.

Usage: python compact_queries.py <root> [pause_batch] [crash_batch crash_step]
pause_batch: after that batch's process step the writer waits until <root>/go exists (it is then
alive, holding batch N's output, with its Delta commit still to come). crash_batch/crash_step:
SIGKILL right after that step of that batch.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import crashkit  # noqa: E402
import increments as inc  # noqa: E402

NAME = "compacted"


def write_input(root: str, files: int, rows: int = 20) -> int:
    d = os.path.join(root, "landing")
    os.makedirs(d, exist_ok=True)
    for f in range(files):
        with open(os.path.join(d, f"part-{f:04d}.json"), "w") as out:
            for r in range(rows):
                out.write(json.dumps({"id": f * 1000 + r, "campaign": f"c{r % 4}"}) + "\n")
    return files * rows


def factory(root: str):
    def compacted():
        return (inc.read_stream.files(os.path.join(root, "landing"), "json", "id BIGINT, campaign STRING",
                                      max_files_per_trigger=1)
                .write_stream.format("delta").output_mode("append").query_name(NAME)
                .checkpoint_location(os.path.join(root, "chk")).option("path", os.path.join(root, "lake", "out"))
                .trigger(available_now=True))
    return compacted


class _Pause(inc.StreamingQueryListener):
    def __init__(self, root: str, batch: int):
        self.root, self.batch = root, batch

    def on_batch_step(self, query_name: str, batch_id: int, step: str) -> None:
        import time
        if batch_id == self.batch and step == "process":
            open(os.path.join(self.root, "paused"), "w").close()
            while not os.path.exists(os.path.join(self.root, "go")):
                time.sleep(0.05)


def main() -> None:
    root = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] != "-":
        inc.streams.add_listener(_Pause(root, int(sys.argv[2])))
    crashkit.crash_after(sys.argv[3:5])
    q = factory(root)().start()
    q.await_termination()


if __name__ == "__main__":
    main()

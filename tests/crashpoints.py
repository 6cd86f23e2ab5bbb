"""Crash markers for the subprocess scripts of the crash tests (Bytewax-style): a listener that
SIGKILLs its own process right after a given protocol step of a given batch, with no cleanup.

Scripts import it after `sys.path[:0] = [repo root]; sys.path.append(tests dir)` (the repo root
first, so `state` is the package and not tests/state).
"""
from __future__ import annotations

import os
import signal

import increments as inc


class CrashAt(inc.StreamingQueryListener):
    def __init__(self, batch: int, step: str):
        self.batch, self.step = int(batch), step

    def on_batch_step(self, query_name: str, batch_id: int, step: str) -> None:
        if batch_id == self.batch and step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)

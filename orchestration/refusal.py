"""A refused launch fails its step with one line: why, and what to launch instead, no stack trace.

A plain `dg.Failure` shows in the run page and the run's failure event as
"dagster._core.definitions.events.Failure: <line>" followed by Dagster's own stack frames, which
says nothing to a user whose launch was merely stale. The step's error is built from the raised
exception; when that exception is a DagsterUserCodeProcessError carrying one serialized error,
Dagster shows that error as it is (the path it takes for errors raised in a code server). So a
refusal is a Failure (user failure data: the description, never retried) that is also such an
error, whose one serialized error is the line with no stack.

It reaches into Dagster internals for it (dagster._core.errors, dagster._utils.error, through
orchestration/dagster_internals.py): checked on Dagster 1.13; on any other version, or if the internals moved,
`refusal` returns a plain dg.Failure (the same line, with Dagster's stack trace below it).
"""
from __future__ import annotations

import dagster as dg

CHECKED_ON = "1.13."


def _refusal_class() -> type | None:
    if not dg.__version__.startswith(CHECKED_ON):
        return None
    try:
        from .dagster_internals import DagsterUserCodeProcessError, SerializableErrorInfo  # noqa: PLC0415 - optional: dagster_internals refuses to import outside its Dagster release line
    except ImportError:
        return None

    class Refusal(dg.Failure, DagsterUserCodeProcessError):
        """dg.Failure(description=line, allow_retries=False) shown as the line alone."""

        def __init__(self, line: str):
            DagsterUserCodeProcessError.__init__(self, line, user_code_process_error_infos=[
                SerializableErrorInfo(message=line, stack=[], cls_name=None)])
            self.description, self.metadata, self.allow_retries = line, {}, False

        def __reduce__(self):
            return (type(self), (self.description,))

    return Refusal


_CLASS = _refusal_class()


def refusal(line: str) -> Exception:
    """The exception a refused step raises (module doc)."""
    if _CLASS is not None:
        return _CLASS(line)
    return dg.Failure(description=line, allow_retries=False)

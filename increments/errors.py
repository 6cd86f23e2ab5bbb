"""Exceptions raised by increments.

Every error that reaches a user names the query, the batch, the source (and the file,
line, partition or offset where that is known) and says what to do next.
"""
from __future__ import annotations

from .redaction import redact


class IncrementsError(Exception):
    """Base class of every error increments raises on purpose. Its message is redacted
    (increments/redaction.py): no URL credential or known secret reaches a user through it."""

    def __init__(self, *args: object):
        args = tuple(redact(a) if isinstance(a, str) else a for a in args)
        super().__init__(*args)
        self.args = args


class AnalysisException(IncrementsError):
    """The query cannot run as a stream; raised by the planner before any batch runs."""


class MalformedInputError(IncrementsError):
    """A source produced input that does not fit the declared schema (file/line or offset named)."""


class DataLossError(IncrementsError):
    """Source data the query still needs is gone (deleted file, expired Kafka offsets)."""


class ConcurrentRunError(IncrementsError):
    """Another runner of the same query owns the batch: the log's fence refused this one."""


class IncompatibleCheckpointError(IncrementsError):
    """A restart asked for something the checkpoint fixed at its first run, or the checkpoint and
    its log (or its own files) do not belong together."""


class SinkSchemaError(IncrementsError):
    """The sink's table does not fit the query's output (columns named)."""


class CheckpointAccessError(IncrementsError, OSError):
    """The checkpoint location cannot be read or written (the path and the OS's reason named)."""


class ExpectationFailed(IncrementsError):
    """An expectation declared with on_violation="fail" found failing rows: the batch is not committed.
    Attributes: expectation, condition, batch_id, passed, failed, sample (up to 5 failing rows)."""

    def __init__(self, message: str, *, expectation: str, condition: str, batch_id: int, passed: int, failed: int,
                 sample: list):
        super().__init__(message)
        self.expectation, self.condition, self.batch_id = expectation, condition, batch_id
        self.passed, self.failed, self.sample = passed, failed, sample


class StreamingQueryException(IncrementsError):
    """A running query stopped because a batch failed; `cause` is the original error."""

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.cause = cause


class ArithmeticOverflowError(IncrementsError, ArithmeticError):
    """An integer result does not fit its type (a BIGINT sum, `x + 1` at the type's limit): the
    batch fails, as Spark 4 (ANSI mode, its default) raises ARITHMETIC_OVERFLOW, instead of
    wrapping around. The message names the query, batch, operator and column."""


class DivideByZeroError(IncrementsError, ZeroDivisionError):
    """A division or remainder by zero (`x / 0`, `x % y` with y = 0; integer, decimal or double):
    the batch fails, as Spark 4 (ANSI mode, its default) raises DIVIDE_BY_ZERO or REMAINDER_BY_ZERO,
    instead of giving Infinity or NaN. A NULL operand gives NULL; try_divide / try_mod give NULL for
    a zero divisor. The message names the query, batch, stage and column (or filter)."""

"""Streaming sinks: add_batch(batch_id, table) is idempotent per (query id, batch id)."""
from .base import Sink, SinkResult

__all__ = ["Sink", "SinkResult"]

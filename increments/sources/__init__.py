"""Streaming sources: each has offsets the log can store and replays (start, end] exactly."""
from .base import Source
from .files import FileSource
from .memory import MemorySource

__all__ = ["Source", "FileSource", "MemorySource"]

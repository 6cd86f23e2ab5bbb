"""The checkpoint: query metadata and fixed conf (on a Location), the offsets/commits log and drains (SQL)."""
from .log import BatchLog, CommitEntry, OffsetsEntry, open_log
from .metadata import CheckpointMetadata

__all__ = ["BatchLog", "CommitEntry", "OffsetsEntry", "open_log", "CheckpointMetadata"]

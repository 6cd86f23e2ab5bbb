"""The checkpoint: query metadata and fixed conf, the offsets/commits log, the seen-files log."""
from .log import BatchLog, CommitEntry, OffsetsEntry, open_log
from .metadata import CheckpointMetadata

__all__ = ["BatchLog", "CommitEntry", "OffsetsEntry", "open_log", "CheckpointMetadata"]

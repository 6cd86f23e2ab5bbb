"""Kept for the importers outside the crash kit's owners' files (tests/sources/test_kafka_source.py,
tests/lifecycle/from_sink_queries.py): CrashAt now lives in tests/crashkit.py."""
from crashkit import CrashAt  # noqa: F401

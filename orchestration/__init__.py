"""Dagster orchestration of increments queries: every micro-batch is one Dagster run.

    from orchestration import streaming_query, build_definitions, definitions_from_module
"""
from .factory import (QuerySpec, build_definitions, definitions_from_module, query_definitions,  # noqa: F401
                      streaming_query)

"""The workspace's code location: the queries of module $INCREMENTS_QUERIES (default
examples.queries). Point it at your own module: INCREMENTS_QUERIES=my_pkg.queries dagster dev -w workspace.yaml
"""
import os

from orchestration.factory import definitions_from_module

defs = definitions_from_module(os.environ.get("INCREMENTS_QUERIES", "examples.queries"))

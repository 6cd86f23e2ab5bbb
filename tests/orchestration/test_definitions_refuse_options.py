"""A Dagster code location refuses a query with a misspelled option when its definitions load,
not at its first batch run (issue 27.6)."""
from __future__ import annotations

import pytest

import increments as inc
from increments.options import OptionError
from orchestration.factory import query_definitions


def test_misspelled_option_fails_the_definitions_load(tmp_path):
    def query():
        return (inc.read_stream.files(str(tmp_path / "in"), "json", "id BIGINT").write_stream.format("parquet")
                .query_name("typo").option("state_partition", 7).checkpoint_location(str(tmp_path / "chk")))
    with pytest.raises(OptionError, match="unknown option 'state_partition'; did you mean 'state_partitions'"):
        query_definitions(query, path=str(tmp_path / "out"))


def test_misspelled_streaming_query_option_is_refused_naming_the_nearest(tmp_path):
    def query():
        return (inc.read_stream.files(str(tmp_path / "in"), "json", "id BIGINT").write_stream.format("parquet")
                .query_name("typo2").checkpoint_location(str(tmp_path / "chk")))
    with pytest.raises(OptionError, match="unknown option 'max_retry'; did you mean 'max_retries'"):
        query_definitions(query, path=str(tmp_path / "out"), max_retry=2)

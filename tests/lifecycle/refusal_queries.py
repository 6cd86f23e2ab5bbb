"""Writers `increments check` must refuse with a message, not a traceback
(tests/lifecycle/test_check_refusals.py). Input and checkpoint from REFUSE_IN, REFUSE_CHK."""
from __future__ import annotations

import os

import increments as inc


def _src(**kw):
    return inc.read_stream.files(os.environ["REFUSE_IN"], "json", "id BIGINT", **kw)


def no_table_path():            # format('delta') without .start(path), .option('path') or @streaming_query(path=)
    return _src().write_stream.format("delta").checkpoint_location(os.environ["REFUSE_CHK"])


def misspelled_option():
    return (_src().write_stream.format("delta").option("state_partition", 7).option("path", os.environ["REFUSE_OUT"])
            .checkpoint_location(os.environ["REFUSE_CHK"]))


def misspelled_source_option():
    return (_src(max_file_per_trigger=1).write_stream.format("delta").option("path", os.environ["REFUSE_OUT"])
            .checkpoint_location(os.environ["REFUSE_CHK"]))

"""The checkpoint's metadata on a Location (local disk and moto S3): metadata.json and the first
conf.json are create-only, so two starters agree on one query id and one fixed conf."""
from __future__ import annotations

import pytest

from increments import storage
from increments.checkpoint.metadata import CheckpointMetadata, read_metadata
from increments.errors import IncompatibleCheckpointError


@pytest.fixture(params=["disk", "s3"])
def chk(request, tmp_path):
    if request.param == "s3":
        return storage.location(request.getfixturevalue("s3_bucket") + "/chk")
    return storage.location(str(tmp_path / "chk"))


def test_two_starters_agree_on_one_query_id(chk):
    a = CheckpointMetadata.open(chk, "q", {"state_partitions": 2})
    b = CheckpointMetadata.open(chk.url if not chk.is_local else chk.local_path(), "q", {"state_partitions": 2})
    assert a.query_id == b.query_id == read_metadata(chk)["id"]
    assert chk.read_json("conf.json") == {"state_partitions": 2}


def test_a_different_conf_is_refused_and_new_keys_are_recorded(chk):
    CheckpointMetadata.open(chk, "q", {"state_partitions": 2})
    with pytest.raises(IncompatibleCheckpointError, match=r"state_partitions: checkpoint has 2, this start asks for 4"):
        CheckpointMetadata.open(chk, "q", {"state_partitions": 4})
    m = CheckpointMetadata.open(chk, "q", {"state_partitions": 2, "new_key": "x"})
    assert m.conf == {"state_partitions": 2, "new_key": "x"} == chk.read_json("conf.json")


def test_a_conf_fixed_by_a_racing_starter_wins(chk):
    # the other starter's conf.json landed between this starter's read and its create-only write
    CheckpointMetadata.open(chk, "q", {"state_partitions": 2})
    chk.delete("conf.json")
    real = chk.write_bytes

    def racing_write(name, data, *, create_only=False):
        if name == "conf.json" and create_only:
            real(name, b'{"state_partitions": 8}', create_only=True)
        return real(name, data, create_only=create_only)
    chk.write_bytes = racing_write
    with pytest.raises(IncompatibleCheckpointError, match="checkpoint has 8, this start asks for 2"):
        CheckpointMetadata.open(chk, "q", {"state_partitions": 2})


def test_no_metadata_reads_as_none(chk):
    assert read_metadata(chk) is None

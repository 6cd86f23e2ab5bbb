"""A location in a bucket that does not exist (moto's S3 server): every error names the bucket,
says NoSuchBucket and what to create -- reading, writing, listing, and a query whose Delta sink's
bucket is missing (not blamed on its local checkpoint)."""
from __future__ import annotations

import os

import pytest

import increments as inc
from increments import storage
from increments.errors import IncrementsError


def test_missing_bucket_is_named_with_what_to_create(s3_server, tmp_path):
    loc = storage.location("s3://no-such-bucket-h26/chk")
    for op in (lambda: loc.write_bytes("a", b"x"), lambda: loc.read_bytes("a"), lambda: loc.list("")):
        with pytest.raises(storage.StorageError) as e:
            op()
        assert "NoSuchBucket" in str(e.value) and "'no-such-bucket-h26'" in str(e.value)
        assert "aws s3 mb s3://no-such-bucket-h26" in str(e.value)
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text('{"id": 1}\n')
    with pytest.raises(IncrementsError) as e:
        q = (inc.read_stream.files(str(d), format="json", schema="id BIGINT").write_stream.format("delta")
             .checkpoint_location(os.path.join(str(tmp_path), "chk")).query_name("to_missing")
             .trigger(available_now=True).start("s3://no-such-bucket-h26/out"))
        q.await_termination()
    msg = str(e.value)
    assert "NoSuchBucket" in msg and "'no-such-bucket-h26'" in msg and "Create it" in msg
    assert "checkpoint location" not in msg

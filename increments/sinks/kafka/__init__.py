"""format("kafka"): Spark's Kafka sink on confluent-kafka, exactly once by default (sink.py)."""
from .sink import KafkaSink, KafkaSinkError

__all__ = ["KafkaSink", "KafkaSinkError"]

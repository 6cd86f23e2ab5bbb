"""The rows a format("kafka") sink writes: Spark's Kafka sink columns.

    value      STRING or BINARY, required (NULL: a tombstone)
    key        STRING or BINARY, optional (NULL: no key; the partitioner then picks a partition)
    headers    ARRAY<STRUCT<key: STRING, value: BINARY>>, optional
    partition  INT, optional (NULL or absent: the partitioner, murmur2 on the key as Java's
               default partitioner, so a key lands where Spark's sink would put it)
    topic      STRING, optional when .option("topic", ...) is set; the option overrides the column

Other columns are ignored, as Spark's sink ignores them. `check_schema` refuses a query whose output
does not fit (before any batch, with Spark's messages); `messages` turns a batch into produce calls,
column by column (Arrow -> Python lists in C), failing on a NULL topic with the row named.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ...errors import AnalysisException


def _text_or_bytes(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t))


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _headers_type_ok(t: pa.DataType) -> bool:
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    item = t.value_type
    if not pa.types.is_struct(item) or item.num_fields != 2:
        return False
    names = [item.field(i).name for i in range(2)]
    if names != ["key", "value"]:
        return False
    return _is_text(item.field("key").type) and _text_or_bytes(item.field("value").type)


def check_schema(schema: pa.Schema, topic_option: str | None, where: str) -> None:
    """Spark's KafkaWriter.validateQuery: AnalysisException naming the column and the type it needs."""
    names = set(schema.names)
    if topic_option is None:
        if "topic" not in names:
            raise AnalysisException(f"{where}: topic option required when no 'topic' attribute is present. Use the "
                                    "topic option for setting a topic.")
        if not _is_text(schema.field("topic").type):
            raise AnalysisException(f"{where}: Topic type must be a string, not {schema.field('topic').type}")
    if "value" not in names:
        raise AnalysisException(f"{where}: Required attribute 'value' not found; the output columns are "
                                f"{schema.names}. Select a 'value' column (e.g. to_json(struct_pack(*)) AS value)")
    if not _text_or_bytes(schema.field("value").type):
        raise AnalysisException(f"{where}: value attribute type must be a string or binary, not "
                                f"{schema.field('value').type}; cast it (CAST(x AS VARCHAR)) or encode it (to_json)")
    if "key" in names and not _text_or_bytes(schema.field("key").type):
        raise AnalysisException(f"{where}: key attribute type must be a string or binary, not "
                                f"{schema.field('key').type}")
    if "headers" in names and not _headers_type_ok(schema.field("headers").type):
        raise AnalysisException(f"{where}: headers attribute type must be an array<struct<key:string,value:binary>>, "
                                f"not {schema.field('headers').type}")
    if "partition" in names and not pa.types.is_integer(schema.field("partition").type):
        raise AnalysisException(f"{where}: partition attribute type must be an int, not "
                                f"{schema.field('partition').type}")


@dataclass
class Message:
    topic: str
    value: Any
    key: Any = None
    headers: list[tuple[str, Any]] | None = None
    partition: int | None = None


def _column(table: pa.Table, name: str) -> list[Any] | None:
    return table.column(name).to_pylist() if name in table.column_names else None


def messages(table: pa.Table, topic_option: str | None, where: str) -> Iterator[Message]:
    """The batch's rows as messages, in row order. A NULL topic (no topic option) raises
    ValueError naming the row before anything of that row is produced."""
    n = table.num_rows
    values = _column(table, "value") or [None] * n
    keys = _column(table, "key")
    parts = _column(table, "partition")
    topics = None if topic_option is not None else _column(table, "topic")
    heads = _column(table, "headers")
    for i in range(n):
        topic = topic_option if topics is None else topics[i]
        if topic is None:
            raise ValueError(f"{where}: Null topic present in the data (output row {i}: "
                             f"{table.slice(i, 1).to_pylist()[0]!r}). Use the topic option for setting a topic.")
        h = heads[i] if heads is not None else None
        yield Message(topic, values[i], keys[i] if keys is not None else None,
                      [(e["key"], e["value"]) for e in h] if h else None,
                      parts[i] if parts is not None else None)

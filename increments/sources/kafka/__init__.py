"""read_stream.kafka(...): a replayable Kafka source on confluent-kafka, read by partition and offset.

Offsets are Spark's JSON: {"topic": {"0": 42, "1": 7}}, each number the NEXT offset to read in
that partition. `read(start, end)` returns exactly the records with start[p] <= offset < end[p] of
every partition (a partition missing from `start` starts at 0, as a partition added to the topic).
Consumer groups are never used: no commits, no rebalances; the log's offsets are the only truth.

Columns (as Spark): key, value (binary), topic (string), partition (int32), offset (int64),
timestamp (timestamp[us, UTC]).

Contracts:
- starting_offsets: "earliest", "latest" or {"topic": {"0": 23, "1": -2}} (-2 earliest, -1 latest);
  resolved at the first plan and kept in sources/<index>/initial.json so a restart before batch 0
  committed anything starts from the same place.
- max_offsets_per_trigger is split over partitions in proportion to their backlog (Spark's rule:
  each gets floor(limit * backlog / total), at least 1 when it has a backlog).
- Data loss (fail_on_data_loss=True, the default): an offset the batch needs that the broker no
  longer has (below the low watermark, or beyond the end after a topic was recreated) fails the
  batch with a DataLossError naming topic, partition and the missing range. With False the range
  is skipped, counted in `read_metrics["offsets_skipped"]` and logged.
- Replay: read(start, end) with the same offsets returns the same rows as long as the broker still
  holds them (otherwise the data-loss rule applies).
- Broker round trips: the end of a partition is probed with one fetch from the logical end (the
  plan's latest_offset, prepare_available_now, backlog; initial_offset only for "latest"; under
  AvailableNow latest_offset uses the ends prepare_available_now probed, as Spark does). read()
  does not probe: loss is detected while consuming (end-of-partition before the range's end; out of
  range, or no answer within 1 s, at its start -> probe that partition, then the rule above).
- read() consumes one partition at a time on two consumers in turn, the next partition assigned
  ahead on the other one (librdkafka fetches it meanwhile); probes use a third consumer. Under
  AvailableNow in the local runner, the first consumer is left where the next batch's read starts
  (fetched while this batch is processed and committed): still assigned when it consumed exactly
  up to there, with what librdkafka fetched beyond already queued, else assigned there; and the
  plan of a batch assigns it where that batch's read starts. A read that starts elsewhere
  re-assigns. Which offsets a read returns never depends on it. In that mode the next plan's
  topic-id check (topics.py) is asked at the end of each read. Also in that mode, when a
  partition's rest up to the AvailableNow target is small (at most 20,000 offsets and ~16 MiB of
  values over all partitions), the read that reaches it consumes the rest too and keeps it in
  memory; the following batches take their exact ranges from it, and no consumer stays assigned
  (a consumer at a partition's end polls the broker every fetch.wait.max.ms). A read that starts
  elsewhere (a replay) or reads other columns reads the broker; anything unusual in the rest
  (an error, the partition's end before the target) keeps nothing, so the data-loss rule applies
  in the batch whose range it is.
- parse_json right on the value column (ParseJsonOp calls `parse_values_as`): while a batch is
  read, the values are also parsed as JSON lines on two worker threads, in pieces of about 2 MiB
  (Arrow binary arrays; the join and the parse hold no GIL), as the next messages are consumed;
  the result is only handed to ParseJsonOp (`take_parsed`) for the very table read() returned,
  which checks it and otherwise takes its own exact path. The table read() returns is the same
  with or without it. Only in the local runner (enable_read_ahead): a Dagster read op stages the
  raw rows for another process, which parses them itself.

Modules: offsets.py (starting offsets, the broker's ends, planning, the data-loss rule),
consume.py (read(): consuming a range into an Arrow table), parse.py (the parse while reading),
topics.py (a topic deleted and recreated), source.py (KafkaSource: the client and the mixins).
"""
from .consume import SCHEMA
from .source import KafkaSource

__all__ = ["KafkaSource", "SCHEMA"]

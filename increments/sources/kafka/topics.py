"""A Kafka topic deleted and recreated (KafkaSource's plan and read; see offsets.py).

The source keeps sources/<i>/topic_ids.json: [{"ids": {topic: id}, "reset_after": offsets | None,
"reset_topics": [...]}, ...], one epoch per change of a topic's id (the first at the first plan).
A plan that finds a topic's id changed since the query read from it raises DataLossError, or (with
fail_on_data_loss=False) records an epoch whose reset_after is the batch's start: that batch (and
its redo, or a re-plan after a crash) reads those topics from their new beginning.

The ids are asked with one DescribeTopics request per plan. Under AvailableNow in the local runner,
where the next plan follows the batch at once, the source asks when batch N's read() has consumed its
ranges (`request_topic_ids`, consume.py) and plan N+1 takes that answer if it is at most
_AHEAD_MAX_AGE_S old (the broker's round trip then overlaps batch N's process, write and commit).
Either way the ids are those of a moment after batch N read and before batch N+1 reads, which is
what the check can vouch for: a topic recreated between the check and the read is found by the
read (offsets out of range, the partition's end) or by the next plan.
"""
from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from ...errors import DataLossError
from ...redaction import logger as redacting_logger

log = redacting_logger("increments.sources.kafka")


#: the oldest answer to a DescribeTopics asked ahead (request_topic_ids) a plan takes
_AHEAD_MAX_AGE_S = 0.5


def _describe(src) -> dict:
    if src._admin is None:
        src._admin = AdminClient({"bootstrap.servers": src.bootstrap_servers, **src.client_config})
    return src._admin.describe_topics(TopicCollection(src.topics), request_timeout=10)


def request_topic_ids(src) -> None:
    """Ask for the subscribed topics' ids now, for the next plan's topic_ids (module doc)."""
    try:
        src._ids_ahead = (time.monotonic(), _describe(src))
    except Exception:  # noqa: BLE001 - the plan then asks itself
        src._ids_ahead = None


def topic_ids(src) -> dict[str, str]:
    """Each subscribed topic's id (one DescribeTopics request, or the answer to the one asked
    ahead if recent: module doc); {} when the broker cannot tell."""
    ahead, src._ids_ahead = src._ids_ahead, None
    try:
        if ahead is not None and time.monotonic() - ahead[0] <= _AHEAD_MAX_AGE_S:
            futures = ahead[1]
        else:
            futures = _describe(src)
        out = {}
        for t, fut in futures.items():
            try:
                tid = fut.result().topic_id
            except Exception:  # noqa: BLE001 - the topic does not exist (yet): nothing to compare
                continue
            if tid is not None:
                out[t] = str(tid)
        return out
    except Exception:  # noqa: BLE001 - a broker without topic ids: the offsets-backwards rule only
        return {}


def load_epochs(src) -> list:
    """sources/<i>/topic_ids.json: [{"ids": {topic: id}, "reset_after": offsets | None,
    "reset_topics": [...]}, ...], one epoch per change of a topic's id (first: at the first plan)."""
    if src._epochs is None:
        try:
            src._epochs = json.loads(src.own_files().read_bytes("topic_ids.json"))["epochs"]
        except FileNotFoundError:
            src._epochs = []
    return src._epochs


def save_epochs(src, epochs: list, create_only: bool) -> None:
    try:
        src.own_files().write_bytes("topic_ids.json", json.dumps({"epochs": epochs}, sort_keys=True).encode(),
                                     create_only=create_only)
        src._epochs = epochs
    except FileExistsError:
        src._epochs = None


def reset_after(src, start: Any) -> set[str]:
    """The topics the batch after `start` reads from their beginning (recreated; see recreated)."""
    if src.checkpoint is None:
        return set()
    for e in load_epochs(src):
        if e.get("reset_after") == start:
            return set(e.get("reset_topics", []))
    return set()


def recreated(src, start: Any) -> set[str]:
    """Plan: compare each topic's id with the one the query read so far. A topic deleted and
    recreated (another id) is data loss: its new messages below the offsets read from the old
    topic would never be read. fail_on_data_loss: DataLossError; else the next batch reads that
    topic from its new beginning (an epoch with reset_after=start, kept for a redo or re-plan)."""
    if src.checkpoint is None:
        return set()
    done = reset_after(src, start)
    if done:
        return done
    ids = topic_ids(src)
    if not ids:
        return set()
    epochs = load_epochs(src)
    if not epochs:
        save_epochs(src, [{"ids": ids, "reset_after": None, "reset_topics": []}], create_only=True)
        return set()
    cur = epochs[-1]["ids"]
    changed = sorted(t for t in ids if t in cur and cur[t] != ids[t]
                     and any(int(v) > 0 for v in (start.get(t) or {}).values()))   # something was read
    if not changed:
        if any(t not in cur or cur[t] != ids[t] for t in ids):     # a new topic, or recreated before any read
            save_epochs(src, epochs[:-1] + [{**epochs[-1], "ids": {**cur, **ids}}], create_only=False)
        return set()
    what = "; ".join(f"topic {t!r}: id {cur[t]} -> {ids[t]}, read up to {start.get(t)}" for t in changed)
    msg = (f"deleted and recreated since the query read it ({what}). The new topic's messages below the offsets "
           "read from the old one would never be read.")
    if src.fail_on_data_loss:
        raise DataLossError(src.fail(msg + " Set fail_on_data_loss=False to read the recreated topic from its "
                                           "new beginning (logged and reported), or start a new query with a new "
                                           "checkpoint."))
    log.warning("%s", src.fail(msg + " Reading it from its new beginning (fail_on_data_loss=False)."))
    save_epochs(src, epochs + [{"ids": {**cur, **ids}, "reset_after": start, "reset_topics": changed}],
                create_only=False)
    return set(changed)

"""Kafka offsets: starting offsets, the broker's ends, the next batch's range, the data-loss rule.

Offsets are Spark's JSON ({"topic": {"0": 42}}, the NEXT offset to read per partition); see the
package docstring for the contracts (initial.json, max_offsets_per_trigger's split, AvailableNow's
ends, fail_on_data_loss).
"""
from __future__ import annotations

import json
import math
import time
from typing import Any

from confluent_kafka import OFFSET_END, TopicPartition

from ...errors import DataLossError
from ...redaction import logger as redacting_logger
from .consume import _assign
from .topics import recreated, reset_after

log = redacting_logger("increments.sources.kafka")

_EARLIEST, _LATEST = -2, -1


class KafkaOffsets:
    """KafkaSource's offsets half: the broker's partitions and ends, initial/latest offsets, the
    AvailableNow target, backlog, topic recreation (topics.py) and the data-loss rule."""

    def _partitions(self) -> dict[str, list[int]]:
        c = self._client()
        out = {}
        for t in self.topics:   # one topic's metadata: the whole cluster's can take tens of ms on Tansu
            tm = c.list_topics(topic=t, timeout=10).topics.get(t)
            out[t] = sorted(tm.partitions) if tm is not None and tm.error is None else []
        return out

    def _watermarks(self, parts: dict[str, list[int]], low: bool = True) -> dict[tuple[str, int], tuple[int, int]]:
        """(low, high) per partition (low is 0 unless `low`). High is probed with a fetch from the
        logical end: Tansu answers ListOffsets(latest) with the last batch's base offset, so the
        end-of-partition event (offset = the fetch response's high watermark) gives the real high."""
        c = self._client()
        tps = [(t, p) for t, ps in parts.items() for p in ps]
        if not tps:
            return {}
        lows = {tp: c.get_watermark_offsets(TopicPartition(*tp), timeout=10)[0] if low else 0 for tp in tps}
        result = {}
        c.assign([TopicPartition(t, p, OFFSET_END) for t, p in tps])
        deadline = time.time() + self.fetch_timeout_s
        try:
            while len(result) < len(tps) and time.time() < deadline:
                for m in c.consume(num_messages=100_000, timeout=0.01):
                    err = m.error()
                    if err is not None and err.code() == err._PARTITION_EOF:
                        tp = (m.topic(), m.partition())
                        if tp in lows:
                            result[tp] = (lows[tp], max(lows[tp], m.offset()))
        finally:
            c.unassign()
        pending = sorted(set(tps) - set(result))
        if pending:
            raise DataLossError(self.fail(f"could not reach the end of {pending} within "
                                          f"{self.fetch_timeout_s:.0f} s; is the broker at {self.bootstrap_servers} up?"))
        return result

    # -- offsets --------------------------------------------------------------------------------
    def initial_offset(self) -> dict:
        # the resolved starting offsets are fixed once per checkpoint (Source.pinned_initial_offset)
        return self.pinned_initial_offset(self._resolve_initial)

    def _resolve_initial(self) -> dict:
        parts = self._partitions()
        wants = {}
        for t, ps in parts.items():
            for p in ps:
                want = self.starting_offsets
                if isinstance(want, dict):
                    want = want.get(t, {}).get(str(p), _EARLIEST)
                wants[(t, p)] = want
        need_end = any(w in ("latest", _LATEST) for w in wants.values())
        if need_end:
            wms = self._watermarks(parts)
        else:   # no end needed: the low watermarks alone (no fetch probe)
            c = self._client()
            wms = {tp: (c.get_watermark_offsets(TopicPartition(*tp), timeout=10)[0], None) for tp in wants}
        out: dict[str, dict[str, int]] = {t: {} for t in self.topics}
        for (t, p), (lo, hi) in wms.items():
            want = wants[(t, p)]
            if want in ("earliest", _EARLIEST):
                out[t][str(p)] = lo
            elif want in ("latest", _LATEST):
                out[t][str(p)] = hi
            else:
                out[t][str(p)] = int(want)
        return out

    def latest_offset(self, start: Any, limited: bool = True) -> dict:
        """Every partition's high watermark (new partitions from 0), cut by max_offsets_per_trigger
        and the AvailableNow target. A partition whose end went below `start` (topic recreated) is
        data loss: fail, or (fail_on_data_loss=False) move its offset back to the new end.

        Under AvailableNow the ends probed when the target was fixed are used, without asking the
        broker again (as Spark does): a range lost since then is found by read()."""
        reset = self._recreated(start)
        start = {t: ({} if t in reset else v) for t, v in start.items()}   # recreated: from its new beginning
        if self._target is not None:
            wms = {(t, int(p)): (0, hi) for t, ps in self._target.items() for p, hi in ps.items()}
        else:
            wms = self._watermarks(self._partitions(), low=False)
        end = {t: dict(v) for t, v in start.items()}
        for (t, p), (lo, hi) in wms.items():
            s = start.get(t, {}).get(str(p), 0)
            if hi < s:
                self._loss(t, p, hi, s, f"the partition now ends at {hi} (topic deleted and recreated?)")
            e = hi if self._target is None else min(hi, self._target.get(t, {}).get(str(p), 0))
            end.setdefault(t, {})[str(p)] = max(e, s) if hi >= s else hi
        if limited and self.max_offsets_per_trigger:
            end = self._rate_limit(start, end)
        if self._parse_while_reading:   # the local runner reads it next: fetched while offsets[N] is written
            # (the first range a rest read ahead does not hold: consume.py, _Stash)
            ranges = sorted((t, int(p), start.get(t, {}).get(p, 0)) for t, ps in end.items() for p, e in ps.items()
                            if e > start.get(t, {}).get(p, 0))
            first = next((r for r in ranges if not self._stashed(*r)), None)
            if first is not None:
                _assign(self._readers()[0], *first)
        return end

    def _rate_limit(self, start: dict, end: dict) -> dict:
        sizes = {(t, p): e - start.get(t, {}).get(p, 0) for t, ps in end.items() for p, e in ps.items()}
        total = sum(s for s in sizes.values() if s > 0)
        if total <= self.max_offsets_per_trigger:
            return end
        out = {t: dict(ps) for t, ps in end.items()}
        for (t, p), size in sizes.items():
            if size <= 0:
                continue
            share = self.max_offsets_per_trigger * size / total
            take = math.ceil(share) if share < 1 else math.floor(share)
            out[t][p] = start.get(t, {}).get(p, 0) + min(size, take)
        return out

    def has_new_data(self, start: Any, end: Any) -> bool:
        return any(e != start.get(t, {}).get(p, 0) for t, ps in end.items() for p, e in ps.items())

    def prepare_available_now(self) -> None:
        if self._parse_while_reading:
            self._readers()   # the local runner's read consumers connect while the ends are probed
        parts = self._partitions()
        self._target = {t: {} for t in parts}
        for (t, p), (lo, hi) in self._watermarks(parts, low=False).items():
            self._target[t][str(p)] = hi

    def available_now_target(self) -> Any:
        return self._target

    def set_available_now_target(self, target: Any) -> None:
        self._target = target

    def backlog(self, end: Any) -> dict[str, Any] | None:
        """Offsets available beyond `end` (the Kafka lag of the query), per topic-partition and in total.
        Side-effect free: it only asks the broker for each partition's end."""
        wms = self._watermarks(self._partitions())
        per = {f"{t}/{p}": max(0, hi - (end or {}).get(t, {}).get(str(p), lo)) for (t, p), (lo, hi) in wms.items()}
        return {"offsets_pending": sum(per.values()), "per_partition": per}

    # -- a topic deleted and recreated (topics.py) ----------------------------------
    def _reset_after(self, start: Any) -> set[str]:
        return reset_after(self, start)

    def _recreated(self, start: Any) -> set[str]:
        return recreated(self, start)

    def _loss(self, topic: str, partition: int, lo: int, hi: int, why: str) -> int:
        msg = (f"topic {topic!r}, partition {partition}: offsets [{lo}, {hi}) are no longer available ({why}). "
               "The data was deleted by retention or the topic was recreated before the query read it. "
               "Restart with fail_on_data_loss=False to skip the lost range (it is counted and logged), or "
               "start a new query with a new checkpoint.")
        if self.fail_on_data_loss:
            raise DataLossError(self.fail(msg))
        log.warning("%s", self.fail("skipping: " + msg))
        self.read_metrics["offsets_skipped"] = self.read_metrics.get("offsets_skipped", 0) + (hi - lo)
        return hi - lo

    def _clamp(self, t: str, p: int, s: int, e: int) -> tuple[int, int]:
        """Probe (low, high) and apply the data-loss rule to [s, e): the part the broker still holds."""
        lo, hi = self._watermarks({t: [p]})[(t, p)]
        if s < lo:
            self._loss(t, p, s, min(lo, e), f"the earliest offset the broker holds is {lo}")
            s = min(lo, e)
        if hi < e:
            self._loss(t, p, max(s, hi), e, f"the partition ends at {hi}")
            e = max(s, hi)
        return s, e


def _starting_offsets(value: Any, topics: list[str]) -> Any:
    """starting_offsets checked: "earliest", "latest", or {"topic": {"partition": offset}} (a dict or
    its JSON text) with offsets >= 0, -2 (earliest) or -1 (latest), for subscribed topics only.
    ValueError naming the option and what is wrong."""
    usage = ('use "earliest", "latest" or JSON such as {"clicks": {"0": 42, "1": -2}} (per topic and partition: '
             'an offset, -2 for earliest, -1 for latest)')
    where = f"read_stream.kafka(starting_offsets={value!r})"
    if isinstance(value, str) and value.strip().lower() in ("earliest", "latest"):
        return value.strip().lower()
    if isinstance(value, str):
        if not value.strip().startswith("{"):
            raise ValueError(f"{where}: not 'earliest', 'latest' or JSON; {usage}")
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ValueError(f"{where}: not valid JSON ({e}); {usage}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {usage}")
    out: dict[str, dict[str, int]] = {}
    for t, parts in value.items():
        if t not in topics:
            raise ValueError(f"{where}: topic {t!r} is not subscribed (topics: {topics}); give offsets only for "
                             "the topics the source reads")
        if not isinstance(parts, dict):
            raise ValueError(f"{where}: the value for topic {t!r} must map partitions to offsets; {usage}")
        out[t] = {}
        for p, off in parts.items():
            if not str(p).isdigit() or isinstance(off, bool) or not isinstance(off, int) or off < -2:
                raise ValueError(f"{where}: topic {t!r}, partition {p!r}: offset {off!r} is not valid; {usage}")
            out[t][str(p)] = off
    return out

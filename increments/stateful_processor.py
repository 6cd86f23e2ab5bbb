"""The user API of transform_with_state (PySpark 4's pyspark.sql.streaming.stateful_processor, in
snake_case): StatefulProcessor, its handle, value / list / map state, timer values and TTL.

    class CountPerUser(inc.StatefulProcessor):
        def init(self, handle):
            self.count = handle.get_value_state("count", "n BIGINT", ttl="1 hour")

        def handle_input_rows(self, key, rows, timer_values):
            n = (self.count.get() or (0,))[0] + sum(1 for _ in rows)
            self.count.update((n,))
            yield {"user_id": key[0], "n": n}

    events.group_by("user_id").transform_with_state(CountPerUser(), "user_id STRING, n BIGINT",
                                                     time_mode="processing_time")

Contracts
---------
* `handle_input_rows(key, rows, timer_values)`: `key` is the tuple of grouping values, `rows` an
  iterator of dicts (column -> Python value; TIMESTAMP columns are tz-aware UTC datetimes). It may
  return/yield dicts, tuples (in output-schema order), pyarrow Tables / RecordBatches or pandas
  DataFrames matching the output schema, or nothing.
* `handle_expired_timer(key, timer_values, expired_timer_info)`: same outputs; the timer is
  already deleted when it is called.
* State values are tuples in the declared schema's field order; they are returned as named tuples
  (`row.n` or `row[0]`). `update`/`put` accept a tuple, a dict, or a bare value for one field.
* State is always that of the current grouping key (implicit key, as in Spark): operations on
  state objects are valid inside handle_input_rows / handle_expired_timer only.
* "Now" is deterministic: processing time is the batch's timestamp recorded in offsets[N], the
  watermark is the batch's eviction watermark W_N, so a redo of a batch sees the same clock.
  As in Spark 4.3, TimerValues report -1 for both when time_mode is None; in "processing_time" and
  "event_time" modes both are set (the watermark is W_N, 0 when the query declares none).
* Late rows (event time <= the previous batch's watermark) are dropped before handle_input_rows
  only in time_mode="event_time"; in the other modes every row is handed over (Spark 4.3).
* TTL (`ttl=` ms, a duration string or a timedelta) is processing-time based and needs
  time_mode "processing_time" or "event_time": a value written at batch time T expires at T + ttl
  (expired iff expiry <= batch time); expired values read as absent and are removed at the end of
  the batch. List elements and map entries expire one by one.
* `init(handle)` runs once per state partition per batch on a fresh shallow copy of the processor,
  `close()` after that partition's work; don't keep data in processor attributes across batches:
  keep it in state, which is exactly-once across crashes.
"""
from __future__ import annotations

import collections
import datetime as _dt
from typing import Any, Iterable, Iterator

from state.encoding import decode_value, encode_value, prefix_end

from .durations import parse_duration_ms
from .stateful_codec import (EMPTY, LIST, MAP, VALUE, Codec, kind_prefix, state_key, state_prefix, timer_index_key,
                             timer_key, timer_ms, timer_prefix, ttl_index_key)

def _ttl_ms(ttl: Any) -> int | None:
    if ttl is None:
        return None
    if isinstance(ttl, _dt.timedelta):
        return int(ttl.total_seconds() * 1000)
    ms = parse_duration_ms(ttl)
    if ms <= 0:
        raise ValueError(f"ttl must be positive, got {ttl!r}")
    return ms


class TimerValues:
    def __init__(self, processing_time_ms: int, watermark_ms: int):
        self._pt, self._wm = processing_time_ms, watermark_ms

    def get_current_processing_time_in_ms(self) -> int:
        """The batch's processing time (recorded in offsets[N]: the same on a redo); -1 when
        time_mode is None."""
        return self._pt

    def get_current_watermark_in_ms(self) -> int:
        """The batch's eviction watermark W_N (0 without a watermark); -1 when time_mode is None."""
        return self._wm

    getCurrentProcessingTimeInMs = get_current_processing_time_in_ms
    getCurrentWatermarkInMs = get_current_watermark_in_ms


class ExpiredTimerInfo:
    def __init__(self, expiry_ms: int):
        self._expiry = expiry_ms

    def get_expiry_time_in_ms(self) -> int:
        return self._expiry

    getExpiryTimeInMs = get_expiry_time_in_ms


class QueryInfo:
    def __init__(self, query_id: str, run_id: str, batch_id: int):
        self._q, self._r, self._b = query_id, run_id, batch_id

    def get_query_id(self) -> str:
        return self._q

    def get_run_id(self) -> str:
        return self._r

    def get_batch_id(self) -> int:
        return self._b


class _StateBase:
    kind = ""

    def __init__(self, handle: "StatefulProcessorHandle", name: str, schema: Any, ttl: Any):
        if ttl is not None and handle._time_mode is None:
            raise ValueError(f"state {name!r}: ttl needs time_mode='processing_time' or 'event_time' "
                             "(TTL is processing-time based); transform_with_state was given time_mode=None")
        self._h, self.name = handle, name
        self._codec = Codec(schema, f"{self.kind} state {name!r}") if schema is not None else None
        self.ttl_ms = _ttl_ms(ttl)

    # helpers -------------------------------------------------------------------------
    def _prefix(self) -> bytes:
        return state_prefix(self.kind, self.name, self._h._current_key())

    def _key(self, sub: bytes = b"") -> bytes:
        return state_key(self.kind, self.name, self._h._current_key(), sub)

    def _expiry(self) -> int | None:
        return None if self.ttl_ms is None else self._h._now + self.ttl_ms

    def _alive(self, expiry: int | None) -> bool:
        return expiry is None or expiry > self._h._now

    def _index_ttl(self, expiry: int | None, sub: bytes = b"") -> None:
        if expiry is not None:
            self._h._store.put(ttl_index_key(expiry, self.kind, self.name, self._h._current_key(), sub), EMPTY)


class ValueState(_StateBase):
    """One value per grouping key. Payload: (value dict, expires_at_ms)."""
    kind = VALUE

    def _raw(self):
        b = self._h._store.get(self._key())
        if b is None:
            return None
        v = decode_value(b)
        return v if self._alive(v[1]) else None

    def exists(self) -> bool:
        return self._raw() is not None

    def get(self):
        v = self._raw()
        return None if v is None else self._codec.load(v[0])

    def update(self, new_value: Any) -> None:
        exp = self._expiry()
        self._h._store.put(self._key(), encode_value((self._codec.store(new_value), exp)))
        self._index_ttl(exp)
        self._h._rows["updated"] += 1

    def clear(self) -> None:
        self._h._store.delete(self._key())
        self._h._rows["removed"] += 1


class ListState(_StateBase):
    """A list per grouping key, kept in one row. Payload: (None, None, None, values, expiries)."""
    kind = LIST

    def _items(self) -> tuple[list, list]:
        b = self._h._store.get(self._key())
        if b is None:
            return [], []
        p = decode_value(b)
        vals, exps = p[3], p[4]
        keep = [i for i, e in enumerate(exps) if self._alive(e)]
        return [vals[i] for i in keep], [exps[i] for i in keep]

    def _write(self, vals: list, exps: list) -> None:
        if not vals:
            self._h._store.delete(self._key())
            return
        self._h._store.put(self._key(), encode_value((None, None, None, vals, exps)))

    def exists(self) -> bool:
        return bool(self._items()[0])

    def get(self) -> Iterator:
        return iter([self._codec.load(v) for v in self._items()[0]])

    def put(self, new_state: Iterable[Any]) -> None:
        vals = [self._codec.store(v) for v in new_state]
        exp = self._expiry()
        self._write(vals, [exp] * len(vals))
        self._index_ttl(exp)
        self._h._rows["updated"] += len(vals)

    def append_value(self, new_value: Any) -> None:
        self.append_list([new_value])

    def append_list(self, new_state: Iterable[Any]) -> None:
        vals, exps = self._items()
        add = [self._codec.store(v) for v in new_state]
        exp = self._expiry()
        self._write(vals + add, exps + [exp] * len(add))
        self._index_ttl(exp)
        self._h._rows["updated"] += len(add)

    def clear(self) -> None:
        self._h._rows["removed"] += len(self._items()[0])      # Spark counts the elements
        self._h._store.delete(self._key())

    appendValue, appendList = append_value, append_list


class MapState(_StateBase):
    """A map per grouping key; one row per entry. Payload: (value dict, expires_at_ms, key dict)."""
    kind = MAP

    def __init__(self, handle, name, key_schema, value_schema, ttl):
        super().__init__(handle, name, value_schema, ttl)
        self._kcodec = Codec(key_schema, f"map state {name!r} key")

    def _sub(self, user_key: Any) -> bytes:
        return self._kcodec.key(user_key)

    def _entries(self):
        for _, b in self._h._store.prefix_scan(self._prefix()):
            p = decode_value(b)
            if self._alive(p[1]):
                yield p

    def exists(self) -> bool:
        return next(self._entries(), None) is not None

    def get_value(self, key: Any):
        b = self._h._store.get(self._key(self._sub(key)))
        if b is None:
            return None
        p = decode_value(b)
        return self._codec.load(p[0]) if self._alive(p[1]) else None

    def contains_key(self, key: Any) -> bool:
        return self.get_value(key) is not None

    def update_value(self, key: Any, value: Any) -> None:
        sub, exp = self._sub(key), self._expiry()
        self._h._store.put(self._key(sub), encode_value((self._codec.store(value), exp, self._kcodec.store(key))))
        self._index_ttl(exp, sub)
        self._h._rows["updated"] += 1

    def iterator(self) -> Iterator[tuple]:
        return iter([(self._kcodec.load(p[2]), self._codec.load(p[0])) for p in self._entries()])

    def keys(self) -> Iterator:
        return iter([self._kcodec.load(p[2]) for p in self._entries()])

    def values(self) -> Iterator:
        return iter([self._codec.load(p[0]) for p in self._entries()])

    def remove_key(self, key: Any) -> None:
        self._h._store.delete(self._key(self._sub(key)))
        self._h._rows["removed"] += 1

    def clear(self) -> None:
        self._h._rows["removed"] += sum(1 for _ in self._entries())
        self._h._store.delete_range(self._prefix(), prefix_end(self._prefix()))

    getValue, containsKey, updateValue, removeKey = get_value, contains_key, update_value, remove_key


class StatefulProcessorHandle:
    """Given to StatefulProcessor.init: declares state variables and manages the current key's
    timers. One handle per (batch, state partition); the operator sets the current key."""

    def __init__(self, store: Any, time_mode: str | None, now_ms: int, watermark_ms: int,
                 query_info: QueryInfo | None = None):
        self._store, self._time_mode, self._now, self._wm = store, time_mode, now_ms, watermark_ms
        self._key: tuple | None = None
        self._query_info = query_info
        self.metrics = collections.Counter()
        #: state rows written / removed by the user (Spark's numRowsUpdated / numRowsRemoved: a list
        #: element or map entry counts one, timers do not)
        self._rows: collections.Counter = collections.Counter()

    def _current_key(self) -> tuple:
        if self._key is None:
            raise RuntimeError("state and timers belong to a grouping key: use them inside handle_input_rows "
                               "or handle_expired_timer, not in init/close")
        return self._key

    # state variables -----------------------------------------------------------------
    def get_value_state(self, name: str, schema: Any, ttl: Any = None, ttl_duration_ms: Any = None) -> ValueState:
        ttl = ttl if ttl is not None else ttl_duration_ms
        self.metrics["num_value_state_with_ttl_vars" if ttl is not None else "num_value_state_vars"] += 1
        return ValueState(self, name, schema, ttl)

    def get_list_state(self, name: str, schema: Any, ttl: Any = None, ttl_duration_ms: Any = None) -> ListState:
        ttl = ttl if ttl is not None else ttl_duration_ms
        self.metrics["num_list_state_with_ttl_vars" if ttl is not None else "num_list_state_vars"] += 1
        return ListState(self, name, schema, ttl)

    def get_map_state(self, name: str, key_schema: Any, value_schema: Any, ttl: Any = None,
                      ttl_duration_ms: Any = None) -> MapState:
        ttl = ttl if ttl is not None else ttl_duration_ms
        self.metrics["num_map_state_with_ttl_vars" if ttl is not None else "num_map_state_vars"] += 1
        return MapState(self, name, key_schema, value_schema, ttl)

    def delete_if_exists(self, name: str) -> None:
        """Drop state variable `name` for every key (of this partition: init runs in each)."""
        for kind in (VALUE, LIST, MAP):
            p = kind_prefix(kind, name)
            self.metrics["num_deleted_state_vars"] += bool(self._store.delete_range(p, prefix_end(p)))

    def get_query_info(self) -> QueryInfo | None:
        return self._query_info

    # timers --------------------------------------------------------------------------
    def _check_timers(self) -> None:
        if self._time_mode is None:
            raise ValueError("timers need time_mode='processing_time' or 'event_time' in transform_with_state")

    def register_timer(self, expiry_timestamp_ms: int) -> None:
        self._check_timers()
        ms, key = int(expiry_timestamp_ms), self._current_key()
        self._store.put(timer_key(key, ms), EMPTY)
        self._store.put(timer_index_key(ms, key), EMPTY)
        self.metrics["num_registered_timers"] += 1

    def delete_timer(self, expiry_timestamp_ms: int) -> None:
        self._check_timers()
        ms, key = int(expiry_timestamp_ms), self._current_key()
        self._store.delete(timer_key(key, ms))
        self._store.delete(timer_index_key(ms, key))
        self.metrics["num_deleted_timers"] += 1

    def list_timers(self) -> Iterator[int]:
        self._check_timers()
        return iter([timer_ms(k) for k, _ in self._store.prefix_scan(timer_prefix(self._current_key()))])

    getValueState, getListState, getMapState = get_value_state, get_list_state, get_map_state
    registerTimer, deleteTimer, listTimers, deleteIfExists = register_timer, delete_timer, list_timers, delete_if_exists
    getQueryInfo = get_query_info


class StatefulProcessor:
    """Subclass and implement handle_input_rows (and handle_expired_timer when using timers)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare state variables (handle.get_value_state(...)); runs per partition per batch."""

    def handle_input_rows(self, key: tuple, rows: Iterator[dict], timer_values: TimerValues):
        raise NotImplementedError("StatefulProcessor.handle_input_rows(key, rows, timer_values) must be implemented")

    def handle_expired_timer(self, key: tuple, timer_values: TimerValues, expired_timer_info: ExpiredTimerInfo):
        return None

    def handle_initial_state(self, key: tuple, initial_state: dict, timer_values: TimerValues) -> None:
        """With transform_with_state(..., initial_state=...): called in the query's first batch once per
        initial-state row (a dict) of `key`, before the key's input rows; set the key's state (and
        timers) here. Its return value is ignored (Spark 4: handleInitialState). Default: no-op."""
        return None

    def close(self) -> None:
        """Called after a partition's work in each batch."""


__all__ = ["StatefulProcessor", "StatefulProcessorHandle", "ValueState", "ListState", "MapState",
           "TimerValues", "ExpiredTimerInfo", "QueryInfo"]

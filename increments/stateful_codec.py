"""How transform_with_state's state is encoded in the state store: the keys of its state
variables, timers and time indexes, and the values of a declared schema (stateful_processor.py
uses them through its handle and state objects; operators/transform_with_state.py scans them).

Keys (state.encoding, order-preserving), every one (kind, name, *grouping key, sub: bytes):
    (VALUE|LIST|MAP, state name, *key, sub)        a state variable of one grouping key (sub: b"",
                                                   a map entry's encoded user key)
    (TIMER, "", *key, encode_key((expiry ms,)))    a timer of one grouping key
    (TIMER_INDEX, pad_ms(expiry), *key, b"")       the same timer, ordered by time
    (TTL_INDEX, pad_ms(expiry), *key, encode_key((kind, name, sub)))   a value's TTL expiry
The index names are padded times (pad_ms) so that "every timer / expiry up to T" is one range scan.
Payloads (state.encoding values): a value (value dict, expires_at_ms); a list (None, None, None,
values, expiries); a map entry (value dict, expires_at_ms, key dict); timers and index rows EMPTY.
"""
from __future__ import annotations

import collections
from typing import Any

from state.encoding import decode_key, encode_key, encode_value

from .types import parse_schema

VALUE, LIST, MAP, TIMER = "value", "list", "map", "timer"
TIMER_INDEX, TTL_INDEX = "~timer", "~ttl"     # name = padded expiry: range scans by time
_PAD = 1 << 62
EMPTY = encode_value(())                      # payload of timer and index rows


def pad_ms(ms: int) -> str:
    """A string whose order is the order of the int ms (for the time-ordered index keys)."""
    return f"{int(ms) + _PAD:020d}"


def unpad_ms(s: str) -> int:
    return int(s) - _PAD


def kind_prefix(kind: str, name: str) -> bytes:
    """The prefix of state variable `name` of `kind` for every grouping key."""
    return encode_key((kind, name))


def state_prefix(kind: str, name: str, key: tuple) -> bytes:
    """The prefix of state variable `name` of one grouping key (a map's entries)."""
    return encode_key((kind, name) + key)


def state_key(kind: str, name: str, key: tuple, sub: bytes = b"") -> bytes:
    return encode_key((kind, name) + key + (sub,))


def ttl_index_key(expiry_ms: int, kind: str, name: str, key: tuple, sub: bytes = b"") -> bytes:
    return encode_key((TTL_INDEX, pad_ms(expiry_ms)) + key + (encode_key((kind, name, sub)),))


def timer_prefix(key: tuple) -> bytes:
    return encode_key((TIMER, "") + key)


def timer_key(key: tuple, expiry_ms: int) -> bytes:
    return encode_key((TIMER, "") + key + (encode_key((int(expiry_ms),)),))


def timer_ms(timer: bytes) -> int:
    """The expiry of a timer_key."""
    return decode_key(decode_key(timer)[-1])[0]


def timer_index_key(expiry_ms: int, key: tuple) -> bytes:
    return encode_key((TIMER_INDEX, pad_ms(expiry_ms)) + key + (b"",))


class Codec:
    """Values of one declared schema: user input -> stored dict, stored dict -> named tuple."""

    def __init__(self, schema: Any, what: str):
        self.schema = parse_schema(schema)
        self.names = self.schema.names
        self.row = collections.namedtuple("Row", self.names, rename=True)
        self.what = what

    def store(self, v: Any) -> dict:
        if isinstance(v, dict):
            missing = [n for n in self.names if n not in v]
            if missing:
                raise ValueError(f"{self.what}: value {v!r} lacks fields {missing} (schema: {self.schema})")
            return {n: v[n] for n in self.names}
        if not isinstance(v, (tuple, list)):
            v = (v,)
        if len(v) != len(self.names):
            raise ValueError(f"{self.what}: value {v!r} has {len(v)} fields, the schema has {len(self.names)} "
                             f"({self.schema})")
        return dict(zip(self.names, v))

    def load(self, d: dict | None):
        return None if d is None else self.row(*(d.get(n) for n in self.names))

    def key(self, v: Any) -> bytes:
        """A value of this schema as a key part (a map entry's sub: its user key)."""
        d = self.store(v)
        return encode_key(tuple(d[n] for n in self.names))

"""Parsing of duration strings ("10 minutes", "1 hour", "30 seconds", "1 day 2 hours")."""
from __future__ import annotations

import re

_UNIT_MS = {
    "millisecond": 1, "milliseconds": 1, "ms": 1, "msec": 1,
    "second": 1000, "seconds": 1000, "sec": 1000, "secs": 1000, "s": 1000,
    "minute": 60_000, "minutes": 60_000, "min": 60_000, "mins": 60_000, "m": 60_000,
    "hour": 3_600_000, "hours": 3_600_000, "h": 3_600_000,
    "day": 86_400_000, "days": 86_400_000, "d": 86_400_000,
    "week": 7 * 86_400_000, "weeks": 7 * 86_400_000,
}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def parse_duration_ms(text: str | int | float) -> int:
    """Return the duration in milliseconds; numbers are taken as milliseconds.

    Accepts Spark's interval strings, optionally prefixed by "interval":
    "15 minutes", "1 hour 30 minutes", "500 milliseconds".
    """
    if isinstance(text, (int, float)):
        return int(text)
    s = text.strip().lower()
    if s.startswith("interval"):
        s = s[len("interval"):]
    pos, total, matched = 0, 0.0, False
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m or m.group(2) not in _UNIT_MS:
            raise ValueError(f"cannot parse duration {text!r}: expected e.g. '10 minutes', '1 hour', '30 seconds'")
        total += float(m.group(1)) * _UNIT_MS[m.group(2)]
        pos, matched = m.end(), True
    if not matched:
        raise ValueError(f"cannot parse duration {text!r}: expected e.g. '10 minutes', '1 hour', '30 seconds'")
    return int(total)

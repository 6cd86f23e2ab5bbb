"""Properties of the duration parser (increments/durations.py) on generated strings (hypothesis): a sum
of "<number> <unit>" parts, in any letter case, with or without the "interval" prefix and spacing,
is the sum of its parts in milliseconds; a number is milliseconds; anything else is refused with
the text and an example in the message."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from increments.durations import parse_duration_ms

UNIT_MS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "sec": 1000, "second": 1000,
           "seconds": 1000, "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000,
           "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "d": 86_400_000, "day": 86_400_000,
           "days": 86_400_000, "week": 604_800_000, "weeks": 604_800_000}

PART = st.tuples(st.integers(0, 10_000), st.sampled_from(sorted(UNIT_MS)), st.sampled_from([" ", "", "  "]),
                 st.booleans())


def _text(parts, prefix: bool) -> str:
    words = [f"{n}{gap}{unit.upper() if upper else unit}" for n, unit, gap, upper in parts]
    return ("INTERVAL " if prefix else "") + " ".join(words)


@settings(max_examples=100, deadline=None)
@given(st.lists(PART, min_size=1, max_size=4), st.booleans())
def test_a_sum_of_parts_is_the_sum_of_their_milliseconds(parts, prefix):
    assert parse_duration_ms(_text(parts, prefix)) == sum(n * UNIT_MS[u] for n, u, _, _ in parts)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10 ** 12))
def test_a_number_is_milliseconds(n):
    assert parse_duration_ms(n) == n


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="abcxyz -+.,;", max_size=12) | st.from_regex(r"\A\d+\s*(fortnights?|yrs|q)\Z"))
def test_text_without_a_known_unit_after_each_number_is_refused(text):
    with pytest.raises(ValueError, match="cannot parse duration .*expected e.g. '10 minutes'"):
        parse_duration_ms(text)

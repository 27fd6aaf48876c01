"""Units of configuration and rule values: durations like 30s, 5m or 500ms."""

from __future__ import annotations

import math
import re

from kdiag.core.quote import quote

DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | float) -> float:
    """Seconds in '20s', '1m', '500ms', '2h' or a bare number of seconds (callers check the range)."""
    number: str | float
    if isinstance(text, int | float) and not isinstance(text, bool):
        number, unit = text, "s"
    elif isinstance(text, str) and (m := DURATION.match(text.strip())):
        number, unit = m.group(1), m.group(2) or "s"
    else:
        raise ValueError(f"{quote(text)} is not a duration like 30s, 5m or 500ms")
    try:
        return float(number) * DURATION_UNITS[unit]
    except OverflowError:  # an integer beyond float: outside every range
        return math.inf


def format_duration(seconds: float) -> str:
    """Seconds as text in their largest unit and the next one when not zero: '45s', '5m 20s', '1h', '3h 7m', '2d 4h'."""
    whole = round(seconds)
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    first = next(i for i, (_, size) in enumerate(units) if whole >= size or size == 1)
    (big, big_size), parts = units[first], []
    parts.append(f"{whole // big_size}{big}")
    if first + 1 < len(units) and (rest := whole % big_size // units[first + 1][1]):
        parts.append(f"{rest}{units[first + 1][0]}")
    return " ".join(parts)

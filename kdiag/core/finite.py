"""One value never breaks an output: a time no calendar can show and a non-finite number are left out of what is
written (the page, the JSON, the state file, Alertmanager), counted per output, and logged at most once a minute."""

from __future__ import annotations

import collections
import json
import logging
import math
import threading
import time
from datetime import UTC, datetime
from typing import Any

from kdiag.core.quote import quote

log = logging.getLogger(__name__)

LOGGED_EVERY = 60.0
SKIPPED: collections.Counter[str] = collections.Counter()  # values left out, by output, since start
_logged: dict[str, float] = {}
_lock = threading.Lock()


def skip(output: str, what: str, value: Any) -> None:
    """Count a value left out of an output; log it unless this output logged one within the last minute."""
    now = time.monotonic()
    with _lock:
        SKIPPED[output] += 1
        if now - _logged.get(output, -LOGGED_EVERY) < LOGGED_EVERY:
            return
        _logged[output] = now
    log.warning("%s: left out %s %s (no calendar or JSON can show it; %d left out of it so far)", output, what,
                quote(value), SKIPPED[output])


def utc(t: Any, output: str, what: str = "a time") -> datetime | None:
    """The UTC datetime of a Unix time, None (skipped and counted) when it is not finite or outside years 1-9999."""
    try:
        return datetime.fromtimestamp(t, UTC)
    except (ValueError, OverflowError, OSError, TypeError):
        skip(output, what, t)
        return None


def local_text(t: Any, pattern: str, output: str, what: str = "a time") -> str:
    """A Unix time as local time in strftime's pattern, "?" (skipped and counted) when it cannot be shown."""
    if (at := utc(t, output, what)) is None:
        return "?"
    return at.astimezone().strftime(pattern)


def without_nan(value: Any) -> Any:
    """value with every NaN and infinity inside it (dict values, list items) as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: without_nan(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_nan(v) for v in value]
    return value


def dumps(value: Any, output: str, **options: Any) -> str:
    """JSON any parser takes: NaN and infinities as null (counted for the output)."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:  # the rare cycle with a non-finite value: the common one costs no walk of the whole object
        skip(output, "a value that is not a finite number", "NaN or infinity")
        return json.dumps(without_nan(value), allow_nan=False, **options)

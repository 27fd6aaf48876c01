"""Bounded quoting of user values for error messages, so no input can make a message large."""

from __future__ import annotations

import reprlib
from typing import Any

LIMIT = 80


class _Repr(reprlib.Repr):
    """reprlib stops early on long strings, big containers and deep nesting, so quoting a huge value is cheap."""

    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int over 4300 digits raises ValueError; far smaller ones are already unreadable.
        return super().repr_int(x, level) if x.bit_length() <= 256 else f"<an integer of {x.bit_length()} bits>"


_REPR = _Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = LIMIT
_REPR.maxlevel = 3


def quote(value: Any, limit: int = LIMIT) -> str:
    """repr() of value cut to about `limit` characters; strings keep their head, not their middle."""
    return cut(repr(value[: limit + 1]) if isinstance(value, str) else _REPR.repr(value), limit)


def cut(text: str, limit: int = LIMIT) -> str:
    """text, or its first `limit` characters ending in '...'."""
    return text if len(text) <= limit else text[: limit - 3] + "..."

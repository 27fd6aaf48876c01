"""Outside values made safe to show: bounded quoting for error messages, control characters escaped for terminals."""

from __future__ import annotations

import hashlib
import reprlib
from typing import Any

LIMIT = 80
# A label value from outside (a group id, a topic, a process name) is cut past this: a Prometheus with
# label_value_length_limit fails the whole scrape on one longer value. A short hash of the whole value follows the cut,
# so two long ids that share their first LABEL_LIMIT characters stay two series.
LABEL_LIMIT = 300  # also the longest collector error reason kdiag exports (MAX_REASON), which stays whole


class _Repr(reprlib.Repr):
    """reprlib stops early on long strings, big containers and deep nesting, so quoting a huge value is cheap."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = self.maxother = self.maxlong = LIMIT
        self.maxlevel = 3

    def repr_int(self, x: int, level: int) -> str:
        # repr() of an int over 4300 digits raises ValueError; far smaller ones are already unreadable.
        return super().repr_int(x, level) if x.bit_length() <= 256 else f"<an integer of {x.bit_length()} bits>"


_REPR = _Repr()


def quote(value: Any, limit: int = LIMIT) -> str:
    """repr() of value cut to about `limit` characters; strings keep their head, not their middle."""
    return cut(repr(value[: limit + 1]) if isinstance(value, str) else _REPR.repr(value), limit)


def cut(text: str, limit: int = LIMIT) -> str:
    """text, or its first `limit` characters ending in '...'."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(text: str) -> str:
    """text with every character a terminal or a line split would act on shown as \\xNN, \\uNNNN or \\UNNNNNNNN."""
    # Not printable: C0 and C1 controls (ESC, CR, NEL), DEL, line and paragraph separators, format characters (bidi
    # overrides), lone surrogates (undecodable bytes) and every other space or unassigned code point.
    return text if text.isprintable() else "".join(c if c.isprintable() else _escape(c) for c in text)


def printable_lines(text: str) -> str:
    """Multi-line text made printable line by line: its newlines stay, any other control character is escaped."""
    return "\n".join(map(printable, text.split("\n")))



def label_value(text: str) -> str:
    """text as a label value: printable(), and past LABEL_LIMIT characters its head, '…' and 8 hex of its SHA-256."""
    shown = printable(text)
    if len(shown) <= LABEL_LIMIT:
        return shown
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{shown[:LABEL_LIMIT]}…{digest}"


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"

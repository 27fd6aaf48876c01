"""kdiag's log: one line per record, whatever its values hold.

Messages carry strings other users choose (a look-alike broker's paths and arguments, topic and group names): a
newline in one would end the line early and make what follows look like a line of kdiag's own, and escape
sequences would drive the terminal. Control characters in a message are shown as \\xNN (\\u2028 and \\u2029 too);
tracebacks keep their lines, with control characters inside them shown the same way.
"""

from __future__ import annotations

import logging

from kdiag.core.quote import printable, printable_lines

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class EscapingFormatter(logging.Formatter):
    """A Formatter whose messages cannot hold a line break or an escape sequence."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def formatException(self, ei: logging._SysExcInfoType) -> str:
        return printable_lines(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return printable_lines(super().formatStack(stack_info))


def configure(level: int) -> None:
    """Log records at level and above to stderr, through an EscapingFormatter (unless logging is already set up)."""
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter(FORMAT))
    logging.basicConfig(level=level, handlers=[handler])

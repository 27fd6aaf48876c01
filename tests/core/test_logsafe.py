"""kdiag's log formatter: one line per record whatever a value holds; tracebacks keep their lines."""

from __future__ import annotations

import io
import logging

import pytest

from kdiag.core.logsafe import EscapingFormatter


@pytest.fixture
def logged():
    """(a logger writing through an EscapingFormatter, what it wrote)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(EscapingFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("kdiag.test_logsafe")
    logger.addHandler(handler)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_control_characters_in_a_message_show_as_escapes(logged):
    logger, stream = logged
    logger.warning("path %s", "/x\nERROR kdiag.app.daemon: FORGED\r\t\x1b[2J\x00\x7f\x85\u2028é")
    assert stream.getvalue() == (r"WARNING kdiag.test_logsafe: path /x\x0aERROR kdiag.app.daemon: FORGED\x0d\x09\x1b[2J\x00\x7f"
                                 r"\x85\u2028" "é\n")


def test_a_traceback_keeps_its_lines_and_escapes_the_rest(logged):
    logger, stream = logged
    try:
        raise ValueError("bad\x1b[31m")
    except ValueError:
        logger.exception("failed on %s", "a\nb")
    lines = stream.getvalue().splitlines()
    assert lines[0] == r"ERROR kdiag.test_logsafe: failed on a\x0ab"
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == r"ValueError: bad\x1b[31m"

"""Whether a missing service fails a test (`--require-services`) or skips it."""

from __future__ import annotations

import pytest

# Set from `--require-services` by tests/conftest.py.
REQUIRED = False


def unavailable(problem: str):
    """Skip the test, or fail it under --require-services."""
    if REQUIRED:
        pytest.fail(problem)
    pytest.skip(problem)

"""The base of kdiag's errors a user can act on: each carries the exit code the command line returns for it."""

from __future__ import annotations


class KdiagError(Exception):
    """An error the command line reports as one line and ends with exit_code."""

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    def report(self) -> str:
        """What the command line prints after "kdiag: "."""
        return str(self)

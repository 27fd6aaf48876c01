"""Where the tests' data lives: the repository, tests/ and its fixture trees."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
RECORDINGS = TESTS / "recordings"

"""Real-world secret forms (tests/fixtures/secret_forms.txt): none shows, whatever processes.cmdline says."""

from __future__ import annotations

import re
import shlex

import pytest

from kdiag.core.redact import FULL, MASKED, cmdline_label, mask_argv, redact_cmdline_file
from tests.paths import FIXTURES

CORPUS = FIXTURES / "secret_forms.txt"
_MARKED = re.compile(r"\[\[(.+?)\]\]")
CHUNK = 5  # a secret half masked (***@ss@host) still shows a piece this long


def corpus() -> list[tuple[list[str], list[str]]]:
    """(argv, its secrets) for each line of the corpus."""
    forms = []
    for line in CORPUS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            forms.append((shlex.split(_MARKED.sub(r"\1", line)), _MARKED.findall(line)))
    return forms


FORMS = corpus()


def shown_pieces(secret: str, text: str) -> list[str]:
    """The pieces of secret (every CHUNK characters long window) that text shows."""
    size = min(CHUNK, len(secret))
    return sorted({secret[i:i + size] for i in range(len(secret) - size + 1)} & {text[i:i + size] for i in range(len(text))})


def test_the_corpus_holds_the_forms_it_promises() -> None:
    assert len(FORMS) >= 90
    for argv, secrets in FORMS:
        assert secrets and all(s in " ".join(argv) for s in secrets), argv


@pytest.mark.parametrize("mode", [MASKED, FULL])
@pytest.mark.parametrize(("argv", "secrets"), FORMS, ids=[" ".join(a)[:50] for a, _ in FORMS])
def test_no_piece_of_the_secret_shows(argv: list[str], secrets: list[str], mode: str) -> None:
    label = cmdline_label(argv, mode, limit=1 << 20)
    for secret in secrets:
        assert not shown_pieces(secret, label), f"{mode}: {label!r} shows {shown_pieces(secret, label)}"


@pytest.mark.parametrize(("argv", "secrets"), FORMS, ids=[" ".join(a)[:50] for a, _ in FORMS])
def test_a_recording_keeps_no_piece_of_the_secret(argv: list[str], secrets: list[str]) -> None:
    recorded = redact_cmdline_file("\0".join(argv) + "\0")
    for secret in secrets:
        assert not shown_pieces(secret, recorded)
    # Replaying the recording masks it again: nothing changes.
    assert mask_argv(recorded.split("\0")[:-1]) == recorded.split("\0")[:-1]

"""`kdiag diagnose` on a terminal: severities and states in colour, plain text when piped or with NO_COLOR."""

from __future__ import annotations

import io

from kdiag.analysis.catalog import load_catalog
from kdiag.analysis.engine import Engine, EngineState
from kdiag.cli.main import wants_color
from kdiag.report.text import render_text
from kdiag.runtime.pipeline import State

RULE = """\
- id: skew
  kind: cause
  severity: critical
  each: topic
  when: it.leader_skew_ratio > 2.0
  summary: "{it.name} skewed"
  remediation: rebalance
  source: tests
"""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def state(tmp_path) -> State:
    rules = tmp_path / "r.yaml"
    rules.write_text(RULE)
    signals = {"topic": {"\x1b[2Jt": {"name": "\x1b[2Jt", "leader_skew_ratio": 3.0}}}
    return State("h", 1.0, [], {}, signals, Engine(load_catalog([rules])).evaluate(EngineState(), 1.0, signals).current())


def test_severity_and_state_are_coloured_only_when_asked(tmp_path):
    s = state(tmp_path)
    coloured = render_text(s, color=True)
    assert "[\x1b[1;31mcritical\x1b[0m, \x1b[31mfiring\x1b[0m since" in coloured
    assert "\x1b[2J" not in coloured and "\\x1b[2Jt" in coloured  # the subject's own escape stays text
    assert "\x1b" not in render_text(s)


def test_colour_on_a_terminal_without_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert wants_color(Terminal()) and not wants_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_color(Terminal())

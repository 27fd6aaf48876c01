"""The catalog loader refuses a condition that holds when a signal is missing, unless the rule says why (issue 35)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdiag.analysis.catalog import CatalogError, default_rules_dir, load_catalog

pytestmark = pytest.mark.unit

RULE = """\
- id: lint_x
  kind: lint
  severity: info
  each: broker
  when: {when}
{extra}  summary: "{{it.name}}"
  remediation: fix it
  source: test
"""


def load(tmp_path: Path, when: str, extra: str = "") -> list[str]:
    """The catalog's errors for one rule with this condition (empty when it loads)."""
    path = tmp_path / "r.yaml"
    path.write_text(RULE.format(when=when, extra=extra))
    try:
        load_catalog([path])
    except CatalogError as e:
        return [str(x) for x in e.errors]
    return []


@pytest.mark.parametrize("when", [
    "'!has(it.log_flushes_per_second) || it.log_flushes_per_second < 5.0'",
    "'it.leaders > 1.0 && !(has(it.log_flushes_per_second) && it.log_flushes_per_second > 5.0)'",
    "'it.leaders > 1.0 && (it.partitions > 2.0 || !has(host.busy_share))'",
])
def test_a_missing_signal_read_as_harmless_is_refused_with_file_rule_and_expression(tmp_path: Path, when: str) -> None:
    errors = load(tmp_path, when)
    assert len(errors) == 1
    assert errors[0].startswith(f"{tmp_path / 'r.yaml'}:5:")
    assert "rule 'lint_x': when: has(" in errors[0] and "is negated" in errors[0]
    assert "absent_on_purpose" in errors[0] and when.strip("'")[:30] in errors[0]


@pytest.mark.parametrize("when", [
    "'has(it.log_flushes_per_second) && it.log_flushes_per_second < 5.0'",
    "'it.log_flushes_per_second < 5.0'",
    "'!(!has(it.log_flushes_per_second)) && it.leaders != 1.0'",
    "'it.name != \"!has(it.leaders)\"'",
])
def test_a_condition_needing_its_signals_loads(tmp_path: Path, when: str) -> None:
    assert load(tmp_path, when) == []


def test_absent_on_purpose_names_the_signal_and_why(tmp_path: Path) -> None:
    when = "'it.leaders > 1.0 && (!has(it.log_flush_interval_ms) || it.log_flush_interval_ms < 1.0)'"
    why = "  absent_on_purpose:\n    it.log_flush_interval_ms: no default, unset takes the scheduler's\n"
    assert load(tmp_path, when, why) == []
    rules = load_catalog([tmp_path / "r.yaml"])
    assert rules[0].absent_on_purpose == {"it.log_flush_interval_ms": "no default, unset takes the scheduler's"}


@pytest.mark.parametrize(("extra", "message"), [
    ("  absent_on_purpose:\n    it.leaders: why\n", "absent_on_purpose: 'it.leaders' is not tested absent (!has)"),
    ("  absent_on_purpose:\n    it.log_flushes_per_second: ''\n", "absent_on_purpose: expected a mapping"),
    ("  absent_on_purpose: [it.log_flushes_per_second]\n", "absent_on_purpose: expected a mapping"),
])
def test_absent_on_purpose_is_no_silent_exception(tmp_path: Path, extra: str, message: str) -> None:
    errors = load(tmp_path, "'!has(it.log_flushes_per_second)'", extra)
    assert any(message in e for e in errors), errors


def test_the_shipped_catalog_reads_no_missing_signal_as_harmless() -> None:
    rules = {r.id: r for r in load_catalog([default_rules_dir()])}
    assert {r.id for r in rules.values() if r.absent_on_purpose} == {"broker_threads_waiting", "forced_flush_configured"}
    assert "has(" not in rules["loadgen_saturated"].when

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


@pytest.mark.parametrize(("extra", "rank"), [
    ("  evidence: [it.leaders, it.partitions]\n  rank_by: it.partitions\n", ("partitions", 1.0)),
    ("  evidence: [it.leaders, host.busy_share]\n  rank_by: -host.busy_share\n", ("host.busy_share", -1.0)),
    ("  evidence: [it.leaders]\n", ("", 1.0)),
])
def test_rank_by_names_an_evidence_and_its_order(tmp_path: Path, extra: str, rank: tuple[str, float]) -> None:
    assert load(tmp_path, "'it.leaders > 1.0'", extra) == []
    rule = load_catalog([tmp_path / "r.yaml"])[0]
    assert (rule.rank_by, rule.rank_sign) == rank


@pytest.mark.parametrize("rank_by", ["it.partitions", "it.nosuch", "leaders", "[it.leaders]", "'--it.leaders'"])
def test_rank_by_outside_the_evidence_is_refused(tmp_path: Path, rank_by: str) -> None:
    errors = load(tmp_path, "'it.leaders > 1.0'", f"  evidence: [it.leaders]\n  rank_by: {rank_by}\n")
    assert len(errors) == 1 and "rank_by:" in errors[0] and "is not one of the rule's evidence" in errors[0], errors


def test_the_shipped_rules_over_topics_and_groups_rank_their_subjects() -> None:
    rules = load_catalog([default_rules_dir()])
    assert {r.id: r.rank_by for r in rules}["consumer_lag_growing"] == "lag_seconds"
    unranked = {r.id for r in rules if r.each in ("topic", "group") and not r.rank_by}
    assert unranked == {"unclean_leader_election_enabled", "min_insync_replicas_low", "min_isr_unsatisfiable"}

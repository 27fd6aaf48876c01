"""The rule engine: the shipped catalog, errors with positions for broken rules, and the diagnosis state machine."""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kdiag.cli.main import main
from kdiag.analysis.catalog import CatalogError, default_rules_dir, load_catalog
from kdiag.core.units import parse_duration
from kdiag.analysis.engine import Engine, EngineState, render
from tests import paths

FIXTURES = paths.FIXTURES / "rules"
CONTRACT_CAUSES = ("small_packet_storm", "nic_irq_on_cpu0", "swap_in_use", "foreign_io_scanner")


# --- the shipped catalog -------------------------------------------------------------------------------------------


def test_shipped_catalog_loads_with_contract_ids():
    rules = {r.id: r for r in load_catalog([default_rules_dir()])}
    for rid in CONTRACT_CAUSES:
        assert rid in rules, rid
        assert rules[rid].kind == "cause"
    for r in rules.values():
        assert r.remediation and r.source and r.summary
        assert all(target in rules for target in r.explains)


def test_shipped_catalog_passes_rules_check(capsys):
    assert main(["rules", "check"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\d+ rules OK$", out, re.M), out


# --- broken rule files: one error per file, with file:line:column, the rule id and a useful message -----------------

BROKEN = [
    # (fixture, line, column, rule id, message fragment)
    ("cel_syntax.yaml", 6, 35, "broken_cel", "when: CEL Syntax error"),  # column of the second '>' of '>>'
    ("unknown_signal.yaml", 6, 43, "bad_signal", "unknown signal 'it.rx_pps'"),  # column of 'it.rx_pps'
    ("unknown_variable.yaml", 6, 9, "bad_variable", "unknown variable 'nic'"),
    ("unknown_key.yaml", 5, 3, "bad_key", "unknown key 'severty'"),
    ("bad_kind.yaml", 3, 9, "bad_kind", "kind 'reason' is not one of cause, symptom, lint"),
    ("bad_for.yaml", 7, 8, "bad_for", "'20 seconds' is not a duration"),
    ("explains_unknown.yaml", 2, 1, "explains_ghost", "explains unknown rule 'no_such_rule'"),
    ("missing_key.yaml", 2, 3, "no_fix", "missing key 'remediation'"),
]


def catalog_error(path: Path) -> CatalogError:
    with pytest.raises(CatalogError) as info:
        load_catalog([path])
    return info.value


@pytest.mark.parametrize(("name", "line", "column", "rule", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_rule_file(name, line, column, rule, message):
    path = FIXTURES / name
    err = catalog_error(path)
    assert len(err.errors) == 1, str(err)
    e = err.errors[0]
    assert (e.file, e.line, e.column, e.rule) == (str(path), line, column, rule)
    assert message in e.message
    assert str(err).startswith(f"{path}:{line}:{column}: rule '{rule}': ")


def test_unknown_signal_lists_the_valid_names():
    e = catalog_error(FIXTURES / "unknown_signal.yaml").errors[0]
    assert "nic signals are" in e.message and "rx_packets_per_second" in e.message


def test_cel_error_column_points_into_the_expression():
    e = catalog_error(FIXTURES / "cel_syntax.yaml").errors[0]
    text = (FIXTURES / "cel_syntax.yaml").read_text().splitlines()[e.line - 1]
    assert text[e.column - 1] == ">" and text[e.column - 2] == ">"


def test_yaml_syntax_error_has_position():
    path = FIXTURES / "yaml_syntax.yaml"
    e = catalog_error(path).errors[0]
    # The unclosed flow sequence of line 8 is detected at the ':' of line 9.
    assert (e.line, e.column) == (9, 14)
    assert str(e).startswith(f"{path}:9:14: YAML: ")
    assert "flow sequence" in e.message


def test_duplicate_id_across_files():
    d = FIXTURES / "duplicate"
    err = catalog_error(d)
    assert len(err.errors) == 1, str(err)
    e = err.errors[0]
    assert (e.file, e.line, e.rule) == (str(d / "b.yaml"), 11, "same_id")
    assert f"duplicate id, first defined at {d / 'a.yaml'}:2" in e.message
    assert f"{d / 'b.yaml'}:11:1: rule 'same_id'" in str(err)


@pytest.mark.parametrize(("name", "line", "column"), [
    ("cel_syntax_folded.yaml", 8, 29),  # the second '>' of '>>' on the folded scalar's second line
    ("unknown_signal_quoted.yaml", 6, 44),  # 'it.rx_pps' inside a double-quoted scalar
])
def test_positions_inside_folded_and_quoted_scalars(name, line, column):
    e = catalog_error(FIXTURES / name).errors[0]
    assert (e.line, e.column) == (line, column)


def test_every_fixture_file_fails_alone_and_together():
    # Loading the whole fixture dir reports every file's error, not just the first.
    err = catalog_error(FIXTURES)
    files = {Path(e.file).name for e in err.errors}
    assert {b[0] for b in BROKEN} <= files
    assert "yaml_syntax.yaml" in files


@pytest.mark.parametrize("name", [*(b[0] for b in BROKEN), "yaml_syntax.yaml", "duplicate"])
def test_rules_check_exits_1_and_prints_the_position(name, capsys):
    path = FIXTURES / name
    assert main(["rules", "check", "--rules-dir", str(path)]) == 1
    err = capsys.readouterr().err
    assert "the rule catalog has 1 error(s)" in err
    assert re.search(rf"{re.escape(str(path))}\S*:\d+:\d+: ", err), err


def test_empty_rules_dir_is_an_error(tmp_path):
    err = catalog_error(tmp_path)
    assert "no rule files" in str(err)


# --- durations ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [("20s", 20.0), ("1m", 60.0), ("500ms", 0.5), ("2h", 7200.0),
                                               ("15", 15.0), (3, 3.0), ("1.5m", 90.0)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["20 seconds", "-5s", "5d", "", "s"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


# --- evaluation and the state machine -------------------------------------------------------------------------------


def rules_from(tmp_path: Path, text: str):
    f = tmp_path / "rules.yaml"
    f.write_text(textwrap.dedent(text))
    return load_catalog([f])


NIC_RULE = """\
- id: busy_nic
  kind: cause
  severity: warning
  each: nic
  when: it.rx_packets_per_second > 1000.0 && host.cpu_count >= 2.0
  for: 20s
  summary: "{it.name} at {it.rx_packets_per_second:.0f} pps, {it.rx_avg_packet_bytes:.1f} B avg, cpu0 {host.cpu0_net_rx_share:.0%}"
  evidence: [it.rx_packets_per_second, it.rx_avg_packet_bytes, host.cpu_count]
  explains: [slow]
  remediation: batch
  source: tests
- id: slow
  kind: symptom
  severity: critical
  each: host
  when: host.cpu_count > 100.0
  summary: never
  remediation: none
  source: tests
"""


def signals(pps: dict[str, float], cpus: float = 4.0) -> dict:
    return {
        "host": {"host": {"name": "host", "cpu_count": cpus, "cpu0_net_rx_share": 0.5}},
        "nic": {dev: {"name": dev, "rx_packets_per_second": v, "rx_avg_packet_bytes": 64.0} for dev, v in pps.items()},
    }


def test_pending_then_firing_then_resolved(tmp_path):
    engine = Engine(rules_from(tmp_path, NIC_RULE))
    judged = engine.evaluate(EngineState(), 0, signals({"eth0": 10.0}))
    assert judged.current() == []

    judged = engine.evaluate(judged, 10, signals({"eth0": 5000.0}))
    (d,) = judged.current()
    assert (d.rule.id, d.subject, d.state, d.since) == ("busy_nic", "eth0", "pending", 10)

    judged = engine.evaluate(judged, 25, signals({"eth0": 5000.0}))
    (d,) = judged.current()
    assert (d.state, d.since) == ("pending", 10)  # 15 s < for: 20s

    judged = engine.evaluate(judged, 30, signals({"eth0": 6000.0}))
    (d,) = judged.current()
    assert (d.state, d.since) == ("firing", 10)  # since is kept across evaluations
    assert d.summary == "eth0 at 6000 pps, 64.0 B avg, cpu0 50%"
    assert d.evidence == {"rx_packets_per_second": 6000.0, "rx_avg_packet_bytes": 64.0, "host.cpu_count": 4.0}
    assert judged.resolved == ()

    judged = engine.evaluate(judged, 35, signals({"eth0": 10.0}))
    assert judged.current() == []
    (r,) = judged.resolved
    assert (r.rule.id, r.subject, r.state, r.since, r.ended) == ("busy_nic", "eth0", "firing", 10, 35)

    # Resolved is per evaluation; a new episode starts a new `since`.
    judged = engine.evaluate(judged, 40, signals({"eth0": 5000.0}))
    (d,) = judged.current()
    assert judged.resolved == ()
    assert (d.state, d.since) == ("pending", 40)


def test_an_evaluation_leaves_the_judgement_it_went_on_from_as_it_was(tmp_path):
    engine = Engine(rules_from(tmp_path, NIC_RULE))
    first = engine.evaluate(EngineState(), 10, signals({"eth0": 5000.0}))
    second = engine.evaluate(first, 30, signals({"eth0": 6000.0}))
    third = engine.evaluate(second, 35, signals({"eth0": 10.0}))
    assert [(d.state, d.since, d.summary.split()[2]) for d in first.current()] == [("pending", 10, "5000")]
    assert [(d.state, d.since, d.ended) for d in second.current()] == [("firing", 10, None)] and second.resolved == ()
    assert third.active == {} and [(d.since, d.ended) for d in third.resolved] == [(10, 35)]


def test_pending_that_stops_is_not_resolved(tmp_path):
    engine = Engine(rules_from(tmp_path, NIC_RULE))
    judged = engine.evaluate(EngineState(), 0, signals({"eth0": 5000.0}))
    judged = engine.evaluate(judged, 5, signals({"eth0": 1.0}))
    assert judged.current() == []
    assert judged.resolved == ()


def test_each_subject_has_its_own_state(tmp_path):
    engine = Engine(rules_from(tmp_path, NIC_RULE))
    judged = engine.evaluate(EngineState(), 0, signals({"eth0": 5000.0, "eth1": 1.0}))
    judged = engine.evaluate(judged, 20, signals({"eth0": 5000.0, "eth1": 5000.0}))
    active = judged.current()
    assert [(d.subject, d.state, d.since) for d in active] == [("eth0", "firing", 0), ("eth1", "pending", 20)]
    assert [d.to_json()["state"] for d in active] == ["firing", "pending"]


def test_for_zero_fires_at_once(tmp_path):
    engine = Engine(rules_from(tmp_path, NIC_RULE.replace("  for: 20s\n", "", 1)))
    judged = engine.evaluate(EngineState(), 0, signals({"eth0": 5000.0}))
    (d,) = judged.current()
    assert d.state == "firing"


def test_missing_signal_does_not_hold_and_does_not_raise(tmp_path, caplog):
    engine = Engine(rules_from(tmp_path, NIC_RULE))
    judged = EngineState()
    no_pps = {"host": {"host": {"name": "host", "cpu_count": 4.0}}, "nic": {"eth0": {"name": "eth0"}}}
    judged = engine.evaluate(judged, 0, no_pps)
    assert judged.current() == []
    no_host = {"nic": {"eth0": {"name": "eth0", "rx_packets_per_second": 5000.0}}}
    judged = engine.evaluate(judged, 1, no_host)
    assert judged.current() == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_or_with_one_side_missing_still_holds(tmp_path):
    rules = rules_from(tmp_path, """\
        - id: either
          kind: cause
          severity: info
          each: host
          when: host.swap_in_pages_per_second > 10.0 || host.swap_used_bytes > 100.0
          summary: "{host.swap_in_pages_per_second:.0f} pages/s in, {host.swap_used_bytes:.0f} B used"
          evidence: [host.swap_in_pages_per_second, host.swap_used_bytes]
          remediation: none
          source: tests
        """)
    (d,) = Engine(rules).evaluate(EngineState(), 0, {"host": {"host": {"name": "host", "swap_used_bytes": 1000.0}}}).current()
    assert d.summary == "? pages/s in, 1000 B used"
    assert d.evidence == {"host.swap_used_bytes": 1000.0}


def test_evaluation_error_is_logged_once_and_does_not_hold(tmp_path, caplog):
    rules = rules_from(tmp_path, """\
        - id: typed
          kind: lint
          severity: info
          each: nic
          when: it.name > 1.0
          summary: x
          remediation: none
          source: tests
        """)
    engine = Engine(rules)
    judged = EngineState()
    with caplog.at_level(logging.WARNING, logger="kdiag.analysis.engine"):
        judged = engine.evaluate(judged, 0, signals({"eth0": 1.0}))
        assert judged.current() == []
        judged = engine.evaluate(judged, 1, signals({"eth0": 1.0}))
        assert judged.current() == []
    warnings = [r for r in caplog.records if "typed" in r.getMessage()]
    assert len(warnings) == 1


def test_diagnoses_sorted_by_kind_then_rule(tmp_path):
    rules = rules_from(tmp_path, NIC_RULE.replace("host.cpu_count > 100.0", "host.cpu_count > 1.0"))
    active = Engine(rules).evaluate(EngineState(), 0, signals({"eth0": 5000.0})).current()
    assert [(d.rule.kind, d.rule.id) for d in active] == [("cause", "busy_nic"), ("symptom", "slow")]
    assert active[0].to_json()["explains"] == ["slow"]


def test_to_json_contract_keys(tmp_path):
    (d,) = Engine(rules_from(tmp_path, NIC_RULE)).evaluate(EngineState(), 7, signals({"eth0": 5000.0})).current()
    assert set(d.to_json()) == {"rule", "subject", "kind", "severity", "state", "since", "summary", "evidence",
                                "remediation", "explains"}


@pytest.mark.parametrize(("template", "expected"), [
    ("{it.pps:.0f} pps", "1235 pps"),
    ("{it.share:.0%}", "93%"),
    ("{it.big:.3g} B", "1.8e+08 B"),
    ("{it.pps}", "1234.567"),
    ("{it.name} / {it.name:.0f}", "eth0 / eth0"),  # a number format on a string prints the string
    ("{it.absent:.0f} and {host.absent}", "? and ?"),
    ("{nothing.here:.1f}", "?"),
    ("no fields", "no fields"),
])
def test_render(template, expected):
    scope = {"it": {"name": "eth0", "pps": 1234.567, "share": 0.93, "big": 1.8e8}, "host": {"name": "host"}}
    assert render(template, scope) == expected


def test_summary_with_unknown_signal_is_rejected(tmp_path):
    with pytest.raises(CatalogError, match=r"rules\.yaml:7:\d+: rule 'busy_nic': summary: unknown signal 'it\.nope'"):
        rules_from(tmp_path, NIC_RULE.replace("{it.rx_avg_packet_bytes:.1f}", "{it.nope:.1f}"))


def test_evidence_with_unknown_signal_is_rejected(tmp_path):
    with pytest.raises(CatalogError, match=r"rule 'busy_nic': evidence: unknown signal 'it\.nope'"):
        rules_from(tmp_path, NIC_RULE.replace("evidence: [it.rx_packets_per_second,", "evidence: [it.nope,"))


# --- every rule field has its type (issue 12, #5 and #8) -------------------------------------------------------------

WRONG_TYPES = [
    # (replace, with, error after "rules.yaml:")
    ("when: it.rx_packets_per_second > 1000.0 && host.cpu_count >= 2.0", "when: 5",
     "5:9: rule 'busy_nic': when: expected text, got 5"),
    ("- id: busy_nic", "- id: [a, b]", "1:7: id: expected text, got ['a', 'b']"),
    (NIC_RULE.splitlines()[6], "  summary: [a]", "7:12: rule 'busy_nic': summary: expected text, got ['a']"),
    ("evidence: [it.rx_packets_per_second, it.rx_avg_packet_bytes, host.cpu_count]", "evidence: 5",
     "8:13: rule 'busy_nic': evidence: expected a list of text, got 5"),
    ("evidence: [it.rx_packets_per_second,", "evidence: [5,",
     "8:13: rule 'busy_nic': evidence: expected a list of text, got [5, 'it.rx_avg_packet_bytes', 'host.cpu_count']"),
    ("explains: [slow]", "explains: 5", "9:13: rule 'busy_nic': explains: expected a list of text, got 5"),
    ("kind: cause", "kind: {a: 1}", "2:9: rule 'busy_nic': kind: expected text, got {'a': 1}"),
    ("remediation: batch", "remediation: 2024-01-01",
     "10:16: rule 'busy_nic': remediation: expected text, got datetime.date(2024, 1, 1)"),
    ("for: 20s", "for: .inf", "6:8: rule 'busy_nic': for: inf is out of range (expected from 0s to 86400s)"),
    ("for: 20s", "for: .nan", "6:8: rule 'busy_nic': for: nan is out of range (expected from 0s to 86400s)"),
    ("for: 20s", "for: -1", "6:8: rule 'busy_nic': for: -1 is out of range (expected from 0s to 86400s)"),
    ("for: 20s", "for: 25h", "6:8: rule 'busy_nic': for: '25h' is out of range (expected from 0s to 86400s)"),
    ("for: 20s", "for: [1]", "6:8: rule 'busy_nic': for: [1] is not a duration like 30s, 5m or 500ms"),
    ("- id: busy_nic", "- id: busy_nic\n  ? [a]\n  : 1", "2:5: YAML: while constructing a mapping found unhashable key"),
]


@pytest.mark.parametrize(("old", "new", "error"), WRONG_TYPES, ids=[w[1] for w in WRONG_TYPES])
def test_wrong_types_are_errors_with_positions(tmp_path, old, new, error, capsys):
    assert old in NIC_RULE
    with pytest.raises(CatalogError) as info:
        rules_from(tmp_path, NIC_RULE.replace(old, new))
    assert str(info.value).startswith(f"{tmp_path / 'rules.yaml'}:{error}")
    assert main(["rules", "check", "--rules-dir", str(tmp_path / "rules.yaml")]) == 1
    assert "rules OK" not in capsys.readouterr().out


@pytest.mark.integration
def test_daemon_refuses_a_rule_of_the_wrong_type_at_startup(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(NIC_RULE.replace("when: it.rx_packets_per_second > 1000.0 && host.cpu_count >= 2.0", "when: 5"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{s.getsockname()[1]}"
    result = subprocess.run([sys.executable, "-m", "kdiag", "run", "--rules-dir", str(rules), "--listen", listen],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"{rules}:5:9: rule 'busy_nic': when: expected text, got 5\n" in result.stderr
    assert "Traceback" not in result.stderr


def test_scope_defaults_by_subject_and_is_checked(tmp_path):
    assert {r.id: r.scope for r in rules_from(tmp_path, NIC_RULE)} == {"busy_nic": "host", "slow": "host"}
    topic = """\
- id: many
  kind: lint
  severity: info
  each: topic
  when: it.partitions > 1.0
  summary: x
  remediation: x
  source: tests
"""
    assert rules_from(tmp_path, topic)[0].scope == "cluster"
    assert rules_from(tmp_path, topic.replace("each: topic", "each: topic\n  scope: host"))[0].scope == "host"
    with pytest.raises(CatalogError, match=r"rules\.yaml:5:10: rule 'many': scope 'fleet' is not one of host, cluster"):
        rules_from(tmp_path, topic.replace("each: topic", "each: topic\n  scope: fleet"))


def test_shipped_rules_name_their_scope():
    rules = load_catalog([default_rules_dir()])
    text = "".join(p.read_text() for p in default_rules_dir().glob("*.yaml"))
    assert text.count("\n  scope: ") == len(rules)
    assert {r.id for r in rules if r.scope == "cluster"} >= {"partition_skew", "broker_down", "consumer_lag_growing"}


def test_undecodable_subject_names_are_evaluated_not_fatal(tmp_path):
    # os.listdir and os.readlink give bytes that are not UTF-8 as lone surrogates, which CEL refuses to convert: one
    # such subject made Engine.evaluate raise, and with it the whole cycle (Pipeline.step), every cycle.
    odd = os.fsdecode(b"eth\x80")
    rules = rules_from(tmp_path, NIC_RULE.replace("host.cpu_count > 100.0", "host.name != ''"))
    data = signals({odd: 5000.0, "eth0": 5000.0})
    data["host"]["host"]["name"] = os.fsdecode(b"host\xff")
    active = Engine(rules).evaluate(EngineState(), 0, data).current()
    assert [(d.rule.id, d.subject) for d in active] == [("busy_nic", "eth0"), ("busy_nic", odd), ("slow", "host\udcff")]
    assert active[1].summary.startswith(odd)


GLOBAL_AND_PLAIN = """\
- id: plain
  kind: cause
  severity: warning
  each: nic
  when: it.rx_packets_per_second > 1000.0
  summary: plain
  remediation: none
  source: tests
- id: on_host
  kind: cause
  severity: warning
  each: nic
  when: has(it.rx_avg_packet_bytes) && host.cpu_count > 2.0
  summary: on host
  remediation: none
  source: tests
"""


def test_a_subject_whose_signals_held_still_is_judged_again_when_the_globals_it_reads_move(tmp_path):
    engine = Engine(rules_from(tmp_path, GLOBAL_AND_PLAIN))
    nics = signals({"eth0": 5000.0})["nic"]
    judged = engine.evaluate(EngineState(), 0, {**signals({}, cpus=4.0), "nic": nics})
    assert {d.rule.id for d in judged.current()} == {"plain", "on_host"}
    # The same nic signals (the same object, as SignalCache hands on an unchanged kind), the host's moved.
    judged = engine.evaluate(judged, 5, {**signals({}, cpus=1.0), "nic": nics})
    assert {d.rule.id for d in judged.current()} == {"plain"}
    judged = engine.evaluate(judged, 10, {**signals({}, cpus=8.0), "nic": nics})
    assert [(d.rule.id, d.since) for d in judged.current()] == [("on_host", 10), ("plain", 0)]


def test_a_rule_reading_the_subject_whole_gets_every_signal(tmp_path):
    whole = GLOBAL_AND_PLAIN.replace("it.rx_packets_per_second > 1000.0", "size(it) == 3")
    engine = Engine(rules_from(tmp_path, whole))
    judged = engine.evaluate(EngineState(), 0, signals({"eth0": 5.0}, cpus=1.0))
    assert [d.rule.id for d in judged.current()] == ["plain"]


def test_a_subject_whose_unread_signals_moved_is_not_judged_again_but_its_diagnosis_shows_them(tmp_path, monkeypatch):
    engine = Engine(rules_from(tmp_path, NIC_RULE))
    judged = engine.evaluate(EngineState(), 0, signals({"eth0": 5000.0}))
    runs: list[str] = []
    holds = engine._holds
    monkeypatch.setattr(engine, "_holds", lambda rule, context: runs.append(rule.id) or holds(rule, context))
    moved = signals({"eth0": 5000.0})
    moved["nic"]["eth0"]["rx_avg_packet_bytes"] = 80.0  # read by the summary and evidence, not by the condition
    judged = engine.evaluate(judged, 30, moved)
    (d,) = [d for d in judged.current() if d.rule.id == "busy_nic"]
    assert runs == [] and (d.state, d.since) == ("firing", 0)
    assert "80.0 B avg" in d.summary and d.evidence["rx_avg_packet_bytes"] == 80.0
    judged = engine.evaluate(judged, 35, signals({"eth0": 10.0}))
    assert runs == ["busy_nic"] and [d.rule.id for d in judged.current()] == []

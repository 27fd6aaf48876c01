"""The contract between collecting and diagnosing: every sample a registered collector emits is one of the families
it declares, and every family analysis, the host report, the dashboards and the exported alerting rules read is
produced by a registered collector (or kdiag itself)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from tests.collectors.golden import fixture_root
from tests.paths import FIXTURES, RECORDINGS, ROOT

import kdiag
from kdiag.app.wiring import replay
from kdiag.collectors.registry import Shared, discover
from kdiag.config.settings import Config
from kdiag.core.sample import Sample
from kdiag.families import DECLARED, Family, FamilyPattern, declared_family
from kdiag.families.own import COORDINATION_AUTHENTICATED, COORDINATION_FOREIGN_MEMBERS, COORDINATION_RECORDS_REFUSED_TOTAL
from kdiag.kafka.coordination_process import FAMILIES as COORDINATION
from kdiag.families.probe import FAMILIES as PROBE
from kdiag.recording.recording import Recording

PACKAGE = Path(kdiag.__file__).parent
HOST_TREES = [p.parent.name for p in sorted(FIXTURES.glob("*/proc")) if (p.parent / "sys").is_dir()]
# Series kdiag itself makes (the exporter's, the probe's, coordination's): no collector produces them.
OWN = {f.name for f in DECLARED.values() if f.name.startswith(("kdiag_collector_", "kdiag_diagnosis_"))} | {
    f.name for f in (*PROBE, *COORDINATION, COORDINATION_AUTHENTICATED, COORDINATION_FOREIGN_MEMBERS,
                     COORDINATION_RECORDS_REFUSED_TOTAL)}


def names(families: tuple[Family | FamilyPattern, ...]) -> set[str]:
    return {f.name for f in families if isinstance(f, Family)}


def produced() -> set[str]:
    """Every family name a registered collector declares it emits."""
    return {n for r in discover().values() for n in names(r.families)}


def undeclared_by(families: tuple[Family | FamilyPattern, ...], samples: list[Sample]) -> list[str]:
    """Samples that are none of these families (name and kind)."""
    bad = []
    for s in samples:
        family = declared_family(s.name)
        ours = family is not None and (family.name in names(families) or any(
            isinstance(p, FamilyPattern) and p.matches(s.name) for p in families))
        if not ours or family.kind != s.kind:
            bad.append(f"{s.name} ({s.kind})")
    return sorted(set(bad))


@pytest.mark.parametrize("tree", HOST_TREES)
def test_every_sample_a_host_collector_emits_over_a_fixture_tree_is_a_family_it_declares(tree):
    root, config = fixture_root(tree), Config()
    registrations = [r for r in discover().values() if not r.kafka_source]
    shared = Shared(config, {r.name for r in registrations})
    emitted = 0
    for r in registrations:
        collector = r.build(config, shared)
        for _ in range(2):  # the second run emits what needs a first one (rates, the process table)
            try:
                samples = collector.collect(root)
            except (OSError, ValueError):
                continue  # a tree without this collector's source: a failing collector emits nothing
            emitted += len(samples)
            assert undeclared_by(r.families, samples) == [], r.name
    assert emitted


@pytest.mark.parametrize("recording", [
    pytest.param(p.name, marks=[pytest.mark.integration] if p.is_file() else [])  # a real host's: a minute to replay
    for p in sorted(RECORDINGS.iterdir())])
def test_every_series_of_a_replayed_recording_is_declared_by_a_registered_collector(recording):
    state = replay(Recording(RECORDINGS / recording), Config())
    every = tuple(f for r in discover().values() for f in r.families)
    assert state.samples and undeclared_by(every, state.samples) == []


def analysis_reads() -> dict[str, set[str]]:
    """The families each module of analysis/ and the host report imports from kdiag.families: what it reads."""
    reads: dict[str, set[str]] = {}
    for path in [*sorted((PACKAGE / "analysis").glob("*.py")), PACKAGE / "report" / "host.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kdiag.families."):
                module = __import__(node.module, fromlist=["_"])
                found = {getattr(module, a.name) for a in node.names}
                reads.setdefault(path.name, set()).update(f.name for f in found if isinstance(f, Family))
    return reads


def test_every_family_a_signal_or_the_host_report_reads_is_produced_by_a_registered_collector():
    reads = analysis_reads()
    assert sum(len(r) for r in reads.values()) > 100
    missing = {module: sorted(r - produced() - OWN) for module, r in reads.items() if r - produced() - OWN}
    assert missing == {}


def test_a_collector_no_longer_emitting_a_family_a_signal_reads_fails_the_contract(monkeypatch):
    registration = discover()["diskstats"]
    kept = tuple(f for f in registration.families if f.name != "kdiag_disk_io_time_seconds_total")
    monkeypatch.setitem(discover(), "diskstats", registration.__class__(**{**registration.__dict__, "families": kept}))
    reads = analysis_reads()["device_signals.py"]
    assert "kdiag_disk_io_time_seconds_total" in reads - produced()


def metric_names(text: str) -> set[str]:
    """kdiag metric names in a PromQL-bearing text, histogram series suffixes kept."""
    return set(re.findall(r"\bkdiag_[A-Za-z0-9_]+", text)) - {"kdiag_class"}


def test_every_metric_the_dashboards_and_the_exported_alerting_rules_name_is_declared(tmp_path):
    from kdiag.cli.main import main
    assert main(["rules", "export", "--prometheus", "-o", str(tmp_path / "rules.yml")]) == 0
    texts = {p.name: p.read_text() for p in sorted((ROOT / "dashboards").rglob("*.json"))}
    texts["kdiag rules export"] = (tmp_path / "rules.yml").read_text()
    undeclared = {name: sorted(n for n in metric_names(t) if declared_family(n) is None) for name, t in texts.items()}
    assert {k: v for k, v in undeclared.items() if v} == {}
    assert all(json.loads(t) for k, t in texts.items() if k.endswith(".json"))

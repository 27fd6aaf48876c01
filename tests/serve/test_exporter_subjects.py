"""/metrics carries the worst diagnosis.max_subjects_per_rule subjects of each rule and counts the rest (issue 34)."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kdiag.analysis.subject_cap import SubjectCap
from kdiag.kafka.coordination import Reporting
from kdiag.runtime.pipeline import State
from kdiag.serve.exporter import FamilyCache, Published, StateCollector
from tests.analysis.test_subject_cap import judged


def series(text: bytes, family: str) -> list[tuple[dict[str, str], float]]:
    found = {f.name: f for f in text_string_to_metric_families(text.decode())}
    return [(s.labels, s.value) for s in found[family].samples] if family in found else []


def diagnosis_families(state: State, cap: SubjectCap) -> bytes:
    """The exposition of a state's health and diagnoses (without kdiag's own process metrics, read from /proc)."""
    return FamilyCache().render_families(StateCollector(state, cap=cap).collect())


@pytest.mark.unit
def test_metrics_keep_the_worst_and_count_the_subjects_left_out() -> None:
    lags = {f"g{i:04d}": float(i) for i in range(1000)}
    diagnoses = judged(lags, {f"g{i:04d}" for i in range(300)})  # 300 firing, 700 pending
    published = diagnosis_families(State("h", 600.0, [], {}, {}, diagnoses, cluster="c1"), SubjectCap(50))
    active = series(published, "kdiag_diagnosis_active")
    assert sorted(labels["subject"] for labels, _ in active) == [f"g{i:04d}" for i in range(250, 300)]
    assert all(value == 1.0 and labels["cluster"] == "c1" for labels, value in active)
    assert {labels["subject"] for labels, _ in series(published, "kdiag_diagnosis_evidence")} == {
        labels["subject"] for labels, _ in active}
    counts = {(labels["rule"], labels["state"], labels["cluster"]): value
              for labels, value in series(published, "kdiag_diagnosis_subjects")}
    assert counts == {("consumer_lag_growing", "firing", "c1"): 300.0, ("consumer_lag_growing", "pending", "c1"): 700.0}
    omitted = {(labels["rule"], labels["state"]): value
               for labels, value in series(published, "kdiag_diagnosis_subjects_omitted")}
    assert omitted == {("consumer_lag_growing", "firing"): 250.0, ("consumer_lag_growing", "pending"): 700.0}


@pytest.mark.unit
def test_nothing_is_left_out_under_the_cap_and_a_daemon_not_reporting_counts_nothing() -> None:
    diagnoses = judged({"a": 10.0, "b": 20.0}, {"a", "b"})
    text = diagnosis_families(State("h", 600.0, [], {}, {}, diagnoses), SubjectCap(50))
    assert len(series(text, "kdiag_diagnosis_active")) == 2
    assert [v for _, v in series(text, "kdiag_diagnosis_subjects_omitted")] == [0.0, 0.0]
    text = diagnosis_families(State("h", 600.0, [], {}, {}, diagnoses, reporting=Reporting(reporting=False)),
                              SubjectCap(50))
    assert series(text, "kdiag_diagnosis_active") == series(text, "kdiag_diagnosis_subjects") == []


@pytest.mark.integration
def test_the_daemon_caps_metrics_only_the_api_lists_every_diagnosis() -> None:
    diagnoses = judged({f"g{i:03d}": float(i) for i in range(200)}, {f"g{i:03d}" for i in range(200)})
    published = Published(max_subjects=20)
    published.publish(State("h", 600.0, [], {}, {}, diagnoses))
    assert len(series(published.metrics, "kdiag_diagnosis_active")) == 20
    assert len(json.loads(published.diagnoses)["diagnoses"]) == 200

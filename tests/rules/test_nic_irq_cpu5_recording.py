"""Issue 35 item 5: softirq piled on CPU 5 by a NIC's queues is named as nic_irq_single_core, the symptom nested under
it, on a recording made from a real host's /proc text (tests/fixtures/nic-irq-cpu5/README.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.paths import FIXTURES

sys.path.insert(0, str(FIXTURES))
import nic_irq_cpu5

from kdiag.cli.main import main

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nic_irq_cpu5.write(tmp_path_factory.mktemp("nic-irq-cpu5"))


def test_the_nic_steered_to_cpu5_is_the_cause_of_the_saturated_core(recording: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    assert main(["diagnose", "--from", str(recording), "--format", "json"]) == 0
    found = {d["rule"]: d for d in json.loads(capsys.readouterr().out)["diagnoses"]}
    assert set(found) == {"nic_irq_single_core", "softirq_core_saturated", "softnet_backlog_drops"}
    cause = found["nic_irq_single_core"]
    assert cause["subject"] == "eth0" and cause["state"] == "firing"
    assert cause["evidence"]["irq_top_cpu"] == "5" and cause["evidence"]["irqs_per_second"] < 1000
    assert {"softirq_core_saturated", "softnet_backlog_drops"} <= set(cause["explains"])
    assert found["softirq_core_saturated"]["subject"] == "cpu5"


def test_the_text_report_nests_the_symptom_under_its_cause(recording: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["diagnose", "--from", str(recording)]) == 0
    out = capsys.readouterr().out
    symptom = out[out.index("SYMPTOM softirq_core_saturated"):]
    symptom = symptom[:symptom.index("\nSYMPTOM ")] if "\nSYMPTOM " in symptom else symptom
    assert "explained by:\n    CAUSE nic_irq_single_core" in symptom and "no known cause holds" not in symptom


def test_the_same_nic_left_on_cpu0_is_nic_irq_on_cpu0(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # The default placement (no irqbalance) under the same load: NAPI masks the interrupts on CPU0 as well.
    assert main(["diagnose", "--from", str(nic_irq_cpu5.write(tmp_path, hot=0)), "--format", "json"]) == 0
    found = {d["rule"]: d for d in json.loads(capsys.readouterr().out)["diagnoses"]}
    assert set(found) == {"nic_irq_on_cpu0", "softirq_core_saturated", "softnet_backlog_drops"}
    assert found["nic_irq_on_cpu0"]["evidence"]["irqs_per_second"] < 1000
    assert found["softirq_core_saturated"]["subject"] == "cpu0"

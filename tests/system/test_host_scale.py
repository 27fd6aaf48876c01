"""A 128-CPU host with 64 disks and 4 NICs of 32 queues: every subject and its signals, generated at test time."""

from __future__ import annotations

import sys

import pytest

from tests.paths import FIXTURES

sys.path.insert(0, str(FIXTURES))
from big_host import CPUS, DISKS, NICS, QUEUES, disk_name, write_big_host

from kdiag.config.settings import load_config
from kdiag.app.wiring import replay
from kdiag.recording.recording import Recording


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """The last state of a 3-snapshot replay of the big host."""
    recording = Recording(write_big_host(tmp_path_factory.mktemp("big"), 3))
    return replay(recording, load_config())


def test_every_cpu_disk_and_nic_is_a_subject(state):
    signals = state.signals
    assert sorted(signals["cpu"], key=int) == [str(c) for c in range(CPUS)]
    # user+system 0.30, softirq 0.03, irq 0.002
    assert all(s["busy_share"] == pytest.approx(0.332, abs=0.001) for s in signals["cpu"].values())
    assert sorted(signals["disk"]) == sorted(disk_name(i) for i in range(DISKS))
    assert all(s["write_bytes_per_second"] == pytest.approx(30 * 2**20, rel=0.01) for s in signals["disk"].values())
    assert sorted(signals["nic"]) == [f"eth{n}" for n in range(NICS)]
    assert signals["host"]["host"]["cpu_count"] == CPUS


def test_each_nic_owns_its_queues_irqs_across_the_wide_interrupts_table(state):
    for nic in state.signals["nic"].values():
        assert nic["irq_count"] == QUEUES and nic["rx_queues"] == QUEUES
        # 40,000 interrupts/s over 32 queues, each pinned to one CPU; the CPUs irqbalance left behind count nothing now.
        assert nic["irqs_per_second"] == pytest.approx(40000.0, rel=0.01)
        assert nic["irq_top_cpu_share"] == pytest.approx(1 / QUEUES, rel=0.01)


def test_zero_counts_stay_out_of_the_series(state):
    irq_series = [s for s in state.samples if s.name == "kdiag_interrupts_total"]
    # One busy CPU and three stale ones per NIC queue, one CPU per HBA vector, and the timer on CPU0.
    assert len(irq_series) == NICS * QUEUES * 4 + CPUS + 1
    assert all(s.value > 0 for s in irq_series)


def test_a_healthy_big_host_names_no_cause(state):
    assert [d.rule.id for d in state.diagnoses if d.rule.kind == "cause"] == []

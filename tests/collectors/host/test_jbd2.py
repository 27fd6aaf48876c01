import pytest
from tests.collectors.golden import fixture_root

from kdiag.collectors.host.jbd2 import Jbd2Collector, journal_device, parse_jbd2_info


def test_each_journal_with_its_device():
    got = {(s.name, dict(s.labels)["journal"], dict(s.labels).get("phase", "")): s.value
           for s in Jbd2Collector().collect(fixture_root("slow-broker-v2"))}
    assert got[("kdiag_jbd2_commit_seconds", "sdb1-8", "")] == pytest.approx(1.061981)
    assert got[("kdiag_jbd2_transactions_total", "sdb1-8", "")] == 2092
    assert got[("kdiag_jbd2_phase_seconds", "sdb1-8", "flushing")] == pytest.approx(0.64)
    # A journal that has committed nothing prints only its first line.
    assert ("kdiag_jbd2_commit_seconds", "sda1-8", "") not in got and got[("kdiag_jbd2_transactions_total", "sda1-8", "")] == 0


def test_no_ext4_no_series():
    assert Jbd2Collector().collect(fixture_root("slow-broker-v1")) == []


def test_parse():
    # Kernels before 3.x printed "N transaction, each up to ..." without the requested count.
    assert parse_jbd2_info("5 transaction, each up to 2048 blocks\n").transactions == 5
    assert journal_device("dm-0-8") == "dm-0" and journal_device("nvme0n1p2-8") == "nvme0n1p2"
    with pytest.raises(ValueError, match=r"^f line 1: expected 'N transactions"):
        parse_jbd2_info("hello\n", "f")

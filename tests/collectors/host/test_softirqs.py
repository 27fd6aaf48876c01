import pytest
from tests.collectors.golden import FIXTURES, assert_golden, fixture_root

from kdiag.collectors.host.softirqs import SoftirqsCollector, parse_softirqs


@pytest.mark.parametrize("variant", ["host-vm2", "many-core"])
def test_golden(variant):
    assert_golden(f"softirqs-{variant}", SoftirqsCollector().collect(fixture_root(variant)))


def test_parse_many_core():
    softirqs = parse_softirqs((FIXTURES / "many-core/proc/softirqs").read_text())
    assert list(softirqs) == ["HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"]
    assert list(softirqs["NET_RX"]) == [str(c) for c in range(16)]


def test_short_row_names_file_and_line():
    with pytest.raises(ValueError, match=r"^/proc/softirqs line 3: expected 2 counts"):
        parse_softirqs("   CPU0   CPU1\n  HI:  1  2\n  TIMER:  3\n")


def test_missing_file_is_oserror():
    with pytest.raises(OSError):
        SoftirqsCollector().collect(fixture_root("missing"))

import pytest
from tests.collectors.golden import FIXTURES, assert_golden, fixture_root

from kdiag.collectors.host.stat import StatCollector, parse_stat


@pytest.mark.parametrize("variant", ["host-vm2", "many-core", "faults"])
def test_golden(variant):
    assert_golden(f"stat-{variant}", StatCollector().collect(fixture_root(variant)))


def test_many_core_cpus_modes_and_counts():
    stat = parse_stat((FIXTURES / "many-core/proc/stat").read_text())
    assert sorted(stat.cpu_seconds, key=int) == [str(c) for c in range(16)]
    assert list(stat.cpu_seconds["0"]) == ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    assert stat.counts == {"ctxt": 1990473711, "processes": 3911225, "procs_running": 9, "procs_blocked": 2}


def test_ticks_to_seconds():
    stat = parse_stat("cpu  250 0 100 1000\ncpu0 250 0 100 1000 0 0 0 0 0 0\n", ticks_per_second=250)
    assert stat.cpu_seconds == {"0": {"user": 1, "nice": 0, "system": 0.4, "idle": 4, "iowait": 0, "irq": 0, "softirq": 0, "steal": 0}}


def test_newer_kernel_extra_column_and_unknown_line_ignored():
    stat = parse_stat((FIXTURES / "faults/proc/stat").read_text())
    assert stat.cpu_seconds["1"]["steal"] == 2.11
    assert len(stat.cpu_seconds["1"]) == 8
    assert "newstat" not in stat.counts


def test_malformed_line_names_file_and_line():
    with pytest.raises(ValueError, match=r"^/proc/stat line 2: "):
        parse_stat("cpu  1 2 3 4\ncpu0 1 x 3 4\n")


def test_missing_file_is_oserror(tmp_path):
    with pytest.raises(OSError):
        StatCollector().collect(fixture_root("missing"))

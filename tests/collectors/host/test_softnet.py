import pytest
from tests.collectors.golden import FIXTURES, assert_golden, fixture_root

from kdiag.collectors.host.softnet import SoftnetCollector, parse_softnet
from kdiag.core.sample import COUNTER32


@pytest.mark.parametrize("variant", ["host-vm2", "many-core", "faults"])
def test_golden(variant):
    assert_golden(f"softnet-{variant}", SoftnetCollector().collect(fixture_root(variant)))


def test_all_counters_are_32_bit():
    assert {s.kind for s in SoftnetCollector().collect(fixture_root("many-core"))} == {COUNTER32}


def test_many_core_cpu_from_column_13():
    stats = parse_softnet((FIXTURES / "many-core/proc/net/softnet_stat").read_text())
    assert list(stats) == [str(c) for c in range(16)]


def test_values_near_wrap_and_cpu_gap():
    stats = parse_softnet((FIXTURES / "faults/proc/net/softnet_stat").read_text())
    assert stats["0"] == {"processed": 0xFFFFFFF0, "dropped": 0xFFFFFFFF, "times_squeezed": 0xFFFFFFFE}
    assert stats["2"] == {"processed": 3, "dropped": 1, "times_squeezed": 0}  # cpu1 offline


def test_old_kernel_uses_line_number():
    stats = parse_softnet("0000000a 00000001 00000002 00000000 00000000\n\n0000000b 00000000 00000000 0 0\n")
    assert stats == {
        "0": {"processed": 10, "dropped": 1, "times_squeezed": 2},
        "1": {"processed": 11, "dropped": 0, "times_squeezed": 0},
    }


def test_malformed_line_names_file_and_line():
    with pytest.raises(ValueError, match=r"^/proc/net/softnet_stat line 2: not a number"):
        parse_softnet("00000001 00000000 00000000\n0000000g 00000000 00000000\n")
    with pytest.raises(ValueError, match=r"^/proc/net/softnet_stat line 1: expected at least 3 columns"):
        parse_softnet("00000001 00000000\n")


def test_missing_file_is_oserror():
    with pytest.raises(OSError):
        SoftnetCollector().collect(fixture_root("missing"))

import pytest
from tests.collectors.golden import assert_golden, fixture_root

from kdiag.collectors.host.meminfo import MeminfoCollector, parse_meminfo
from kdiag.families import DECLARED
from kdiag.families.host import MEMORY_BYTES, MEMORY_COUNT


def test_golden():
    assert_golden("meminfo-host-vm2", MeminfoCollector().collect(fixture_root("host-vm2")))


def test_every_field_is_a_declared_family_or_one_of_its_patterns():
    samples = MeminfoCollector().collect(fixture_root("host-vm2"))
    assert {s.name for s in samples if s.name in DECLARED} >= {"kdiag_memory_MemTotal_bytes", "kdiag_memory_SwapFree_bytes"}
    assert all(s.name in DECLARED or MEMORY_BYTES.matches(s.name) or MEMORY_COUNT.matches(s.name) for s in samples)


def test_names_and_units():
    values = parse_meminfo("MemTotal:       1000 kB\nActive(anon):  2 kB\nHugePages_Total:       3\n")
    assert values == {
        "kdiag_memory_MemTotal_bytes": 1024000,
        "kdiag_memory_Active_anon_bytes": 2048,
        "kdiag_memory_HugePages_Total": 3,
    }


def test_unexpected_line_names_file_and_line():
    root = fixture_root("meminfo-bad")
    with pytest.raises(ValueError, match=rf"{root.proc}/meminfo line 12: .*Inactive \(file\)"):
        MeminfoCollector().collect(root)

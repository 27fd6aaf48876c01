import pytest
from tests.collectors.golden import assert_golden, fixture_root

from kdiag.collectors.host.meminfo import MeminfoCollector, parse_meminfo


def test_golden():
    assert_golden("meminfo-host-vm2", MeminfoCollector().collect(fixture_root("host-vm2")))


def test_help_covers_every_field_seen():
    collector = MeminfoCollector()
    samples = collector.collect(fixture_root("host-vm2"))
    assert {s.name for s in samples} == set(collector.help)


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

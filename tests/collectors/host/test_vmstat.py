import pytest
from tests.collectors.golden import assert_golden, fixture_root

from kdiag.collectors.host.vmstat import VmstatCollector, parse_vmstat
from kdiag.families.host import VMSTAT


def test_golden():
    assert_golden("vmstat-host-vm2", VmstatCollector().collect(fixture_root("host-vm2")))


def test_host_vm2_has_every_field():
    samples = VmstatCollector().collect(fixture_root("host-vm2"))
    assert {s.name for s in samples} == {f.name for f in VMSTAT.values()}


def test_malformed_line_names_line():
    with pytest.raises(ValueError, match=r"/proc/vmstat line 2"):
        parse_vmstat("pgpgin 1\npgpgout\n")

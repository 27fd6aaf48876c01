import pytest
from tests.collectors.golden import assert_golden, fixture_root

from kdiag.collectors.host.vmstat import FIELDS, VmstatCollector, parse_vmstat


def test_golden():
    assert_golden("vmstat-host-vm2", VmstatCollector().collect(fixture_root("host-vm2")))


def test_host_vm2_has_every_field():
    samples = VmstatCollector().collect(fixture_root("host-vm2"))
    assert {s.name for s in samples} == {f"kdiag_vmstat_{f}_total" for f in FIELDS}


def test_malformed_line_names_line():
    with pytest.raises(ValueError, match=r"/proc/vmstat line 2"):
        parse_vmstat("pgpgin 1\npgpgout\n")

import errno

import pytest
from golden import assert_golden, fixture_root

from kdiag.collectors.netclass import NetclassCollector, speed_bytes


@pytest.mark.parametrize("variant", ["host-vm2", "many-core"])
def test_golden(variant):
    assert_golden(f"netclass-{variant}", NetclassCollector().collect(fixture_root(variant)))


def values(variant):
    return {(s.name, *(v for _, v in s.labels)): s.value for s in NetclassCollector().collect(fixture_root(variant))}


def test_host_vm2_virtual_nics_have_no_speed_and_lo_is_skipped():
    got = values("host-vm2")
    assert not any(key[0] == "kdiag_network_speed_bytes" for key in got)
    assert not any("lo" in key for key in got)
    assert got[("kdiag_network_up", "eth0")] == 1
    assert got[("kdiag_network_up", "ifb0")] == 0
    assert got[("kdiag_network_mtu_bytes", "eth0")] == 1400
    assert got[("kdiag_network_queues", "eth0", "rx")] == 1


def test_many_core_speeds_and_queues():
    got = values("many-core")
    assert got[("kdiag_network_speed_bytes", "eth0")] == 25000 * 125000
    assert got[("kdiag_network_speed_bytes", "ens2f0")] == 100000 * 125000
    assert ("kdiag_network_speed_bytes", "ens2f1") not in got  # down: -1
    assert got[("kdiag_network_queues", "ens2f0", "tx")] == 16


def test_speed_unknown():
    assert speed_bytes("-1\n", "speed") is None
    assert speed_bytes("4294967295\n", "speed") is None
    assert speed_bytes("10000\n", "speed") == 1_250_000_000


class EinvalSpeed:
    """A Root whose speed files fail the way sysfs does for a down or virtual NIC."""

    def __init__(self, root, err):
        self.root, self.err = root, err

    def read_sys(self, rel):
        if rel.endswith("/speed"):
            raise OSError(self.err, "speed")
        return self.root.read_sys(rel)

    def __getattr__(self, name):
        return getattr(self.root, name)


def test_einval_speed_is_skipped_other_errors_raise():
    samples = NetclassCollector().collect(EinvalSpeed(fixture_root("many-core"), errno.EINVAL))
    assert not any(s.name == "kdiag_network_speed_bytes" for s in samples)
    with pytest.raises(OSError):
        NetclassCollector().collect(EinvalSpeed(fixture_root("many-core"), errno.EIO))


def test_malformed_mtu_names_file():
    class BadMtu(EinvalSpeed):
        def read_sys(self, rel):
            return "abc\n" if rel.endswith("/mtu") else self.root.read_sys(rel)

    with pytest.raises(ValueError, match=r"^/sys/class/net/\w+/mtu line 1: "):
        NetclassCollector().collect(BadMtu(fixture_root("many-core"), 0))


def test_missing_sys_is_oserror():
    with pytest.raises(OSError):
        NetclassCollector().collect(fixture_root("missing"))

import errno
import os

import pytest
from tests.collectors.golden import assert_golden, fixture_root

from kdiag.families.own import COLLECTOR_SKIPPED_ENTRIES
from kdiag.collectors.host.netclass import NetclassCollector, speed_bytes

SKIPPED = COLLECTOR_SKIPPED_ENTRIES.name


@pytest.mark.parametrize("variant", ["host-vm2", "many-core", "bonded-host"])
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


def test_einval_speed_is_no_speed_other_errors_skip_the_interface():
    samples = NetclassCollector().collect(EinvalSpeed(fixture_root("many-core"), errno.EINVAL))
    assert not any(s.name == "kdiag_network_speed_bytes" for s in samples)
    assert not any(s.name == SKIPPED for s in samples)
    samples = NetclassCollector().collect(EinvalSpeed(fixture_root("many-core"), errno.EIO))
    assert {s.name for s in samples} == {SKIPPED}
    assert [(dict(s.labels), s.value) for s in samples] == [({"collector": "netclass", "reason": "EIO"}, 3.0)]


def test_bonded_host_bonds_vlan_bridges_and_virtual_nics():
    got = values("bonded-host")
    speeds = {key[1]: v / 125_000 for key, v in got.items() if key[0] == "kdiag_network_speed_bytes"}
    # 802.3ad: both 25G slaves; active-backup: the active 10G slave; a VLAN has its bond's speed, a bridge its ports'.
    assert speeds["bond0"] == 50000 and speeds["bond1"] == 10000 and speeds["bond0.100"] == 50000
    assert speeds["br-data"] == 10000 and speeds["team0"] == 20000
    assert "docker0" not in speeds and "virbr0-nic" not in speeds  # -1: unknown
    assert got[("kdiag_network_queues", "bond0", "tx")] == 16
    devices = {key[1] for key in got if key[0] == "kdiag_network_up"}
    assert "bonding_masters" not in devices and "veth9f3e1b" not in devices
    # bonding_masters is a file, not an interface; the veth that went away between listing and reading is counted.
    assert got[(SKIPPED, "netclass", "ENOENT")] == 1
    assert NetclassCollector({"docker0": 10000}).collect(fixture_root("bonded-host"))


class FailingAttribute(EinvalSpeed):
    """A Root whose `attr` file of one interface fails with an errno, as sysfs does for a driver that refuses it."""

    def __init__(self, root, err, device, attr):
        super().__init__(root, err)
        self.rel = f"class/net/{device}/{attr}"

    def read_sys(self, rel):
        if rel == self.rel:
            raise OSError(self.err, os.strerror(self.err), rel)
        return self.root.read_sys(rel)

    def listdir(self, tree, rel):
        if rel == self.rel:
            raise OSError(self.err, os.strerror(self.err), rel)
        return self.root.listdir(tree, rel)


@pytest.mark.parametrize("err", [errno.EINVAL, errno.ENODEV, errno.EACCES, errno.ENOTDIR, errno.ENOENT, errno.EOPNOTSUPP])
@pytest.mark.parametrize("attr", ["operstate", "mtu", "queues"])
def test_one_refused_attribute_skips_its_interface_only(err, attr):
    samples = NetclassCollector().collect(FailingAttribute(fixture_root("bonded-host"), err, "ens1f0", attr))
    devices = {dict(s.labels).get("device") for s in samples if s.name != SKIPPED}
    assert "ens1f0" not in devices and {"ens1f1", "bond0", "bond0.100", "team0"} <= devices
    skipped = [(dict(s.labels), s.value) for s in samples if s.name == SKIPPED]
    vanished = err == errno.ENOENT  # veth9f3e1b went away too
    assert ({"collector": "netclass", "reason": errno.errorcode[err]}, 1.0 + vanished) in skipped


def test_malformed_mtu_names_file():
    class BadMtu(EinvalSpeed):
        def read_sys(self, rel):
            return "abc\n" if rel.endswith("/mtu") else self.root.read_sys(rel)

    with pytest.raises(ValueError, match=r"^/sys/class/net/\w+/mtu line 1: "):
        NetclassCollector().collect(BadMtu(fixture_root("many-core"), 0))


def test_missing_sys_is_oserror():
    with pytest.raises(OSError):
        NetclassCollector().collect(fixture_root("missing"))

import pytest
from tests.collectors.golden import assert_golden, fixture_root

from kdiag.collectors.host.mounts import MountsCollector, device_for_path, parse_mounts

MOUNTS = parse_mounts(
    "/dev/vda1 / ext4 rw,relatime 0 0\n"
    "/dev/sdb1 /data xfs rw,noatime 0 0\n"
    "/dev/sdc1 /data xfs rw,noatime 0 0\n"
    "/dev/sdd1 /mnt/usb\\040disk vfat rw 0 0\n"
)


@pytest.mark.parametrize("variant", ["host-vm2", "procs-t0"])
def test_golden(variant):
    assert_golden(f"mounts-{variant}", MountsCollector().collect(fixture_root(variant)))


def test_host_vm2_only_block_devices():
    samples = MountsCollector().collect(fixture_root("host-vm2"))
    assert {dict(s.labels)["mountpoint"] for s in samples} == {"/"}


def test_octal_escapes():
    assert MOUNTS[3].mountpoint == "/mnt/usb disk"


def test_device_for_path_longest_prefix_and_last_overmount():
    assert device_for_path(MOUNTS, "/data/kafka-logs") == ("/dev/sdc1", "/data")
    assert device_for_path(MOUNTS, "/data") == ("/dev/sdc1", "/data")
    assert device_for_path(MOUNTS, "/database") == ("/dev/vda1", "/")
    assert device_for_path(MOUNTS, "/mnt/usb disk/x") == ("/dev/sdd1", "/mnt/usb disk")
    assert device_for_path([], "/x") == ("", "")

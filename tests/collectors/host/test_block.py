import errno
import os

import pytest
from tests.collectors.golden import assert_golden, fixture_root

from kdiag.families.own import COLLECTOR_SKIPPED_ENTRIES
from kdiag.collectors.host.block import BlockCollector, parse_rotational, parse_scheduler
from kdiag.core.blockdev import disks_behind

SKIPPED = COLLECTOR_SKIPPED_ENTRIES.name


@pytest.mark.parametrize("variant", ["host-vm2", "old-kernel", "storage-host"])
def test_golden(variant):
    assert_golden(f"block-{variant}", BlockCollector().collect(fixture_root(variant)))


def test_host_vm2_skips_loop_and_zram():
    samples = BlockCollector().collect(fixture_root("host-vm2"))
    assert {dict(s.labels)["device"] for s in samples} == {"vda"}


def test_parse_scheduler():
    assert parse_scheduler("none [mq-deadline] kyber bfq\n") == "mq-deadline"
    assert parse_scheduler("none\n") == "none"
    with pytest.raises(ValueError, match="line 1"):
        parse_scheduler("none kyber\n", "/sys/block/x/queue/scheduler")


def test_parse_rotational():
    assert parse_rotational("1\n") == 1
    with pytest.raises(ValueError):
        parse_rotational("yes\n")


def test_storage_host_stacks():
    root = fixture_root("storage-host")
    assert disks_behind(root, "/dev/mapper/luks-kafka") == ["dm-1", "dm-0", "md0", "nvme0n1", "nvme1n1"]
    assert disks_behind(root, "/dev/mapper/mpatha") == ["dm-2", "sdb", "sdc"]
    assert disks_behind(root, "/dev/dm-1") == disks_behind(root, "/dev/mapper/luks-kafka")
    assert disks_behind(root, "/dev/sda2") == ["sda"]
    assert disks_behind(root, "/dev/nvme2n1") == ["nvme2n1"]


class FailingQueue:
    """A Root whose queue files of one device fail with an errno (a device being removed, a refused attribute)."""

    def __init__(self, root, err, device):
        self.root, self.err, self.prefix = root, err, f"block/{device}/queue/"

    def read(self, tree, rel):
        if rel.startswith(self.prefix):
            raise OSError(self.err, os.strerror(self.err), rel)
        return self.root.read(tree, rel)

    def __getattr__(self, name):
        return getattr(self.root, name)


@pytest.mark.parametrize("err", [errno.ENOENT, errno.ENODEV, errno.EACCES, errno.EINVAL, errno.ENOTDIR])
def test_one_unreadable_device_is_skipped_and_counted(err):
    samples = BlockCollector().collect(FailingQueue(fixture_root("storage-host"), err, "md0"))
    devices = {dict(s.labels)["device"] for s in samples if s.name != SKIPPED}
    assert devices == {"sda", "nvme0n1", "nvme1n1", "nvme2n1", "dm-0", "dm-1", "dm-2", "sdb", "sdc"}
    assert [(dict(s.labels), s.value) for s in samples if s.name == SKIPPED] == [
        ({"collector": "block", "reason": errno.errorcode[err]}, 1.0)]

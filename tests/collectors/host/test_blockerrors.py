import shutil
from pathlib import Path

import pytest
from tests.collectors.golden import fixture_root
from tests.paths import FIXTURES

from kdiag.core.root import Root

from kdiag.collectors.host.blockerrors import BlockErrorsCollector, parse_count


def test_scsi_error_counts_in_hex_and_md_members_by_disk():
    got = {(s.name, tuple(sorted(s.labels))): s.value for s in BlockErrorsCollector().collect(fixture_root("slow-broker-v2"))}
    assert got[("kdiag_disk_io_errors_total", (("device", "sdb"),))] == 26
    assert got[("kdiag_disk_io_errors_total", (("device", "sda"),))] == 0
    assert got[("kdiag_md_member_errors_total", (("device", "md0"), ("disk", "sdc"), ("member", "sdc1")))] == 3
    assert ("kdiag_disk_io_errors_total", (("device", "vda"),)) not in got  # virtio counts nothing there


def test_parse_count():
    assert parse_count("0x1a\n", "ioerr_cnt", base=16) == 26 and parse_count("3\n", "errors") == 3
    with pytest.raises(ValueError, match=r"^errors line 1: expected a count"):
        parse_count("many\n", "errors")


def test_no_sys_block_is_oserror():
    with pytest.raises(OSError):
        BlockErrorsCollector().collect(fixture_root("slow-broker-v1"))


def test_kernel_logged_errors_count_per_disk_from_the_first_cycle(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    shutil.copy(FIXTURES / "kmsg/this-machine-boot.txt", kmsg)
    fixture = fixture_root("slow-broker-v2")
    root, collector = Root(fixture.proc, fixture.sys, kmsg=str(kmsg)), BlockErrorsCollector()

    def kernel_errors() -> dict[str, float]:
        return {dict(s.labels)["device"]: s.value for s in collector.collect(root) if s.name == "kdiag_kernel_disk_errors_total"}

    assert kernel_errors() == dict.fromkeys(["md0", "sda", "sdb", "sdc", "sdd", "vda"], 0)
    with kmsg.open("a") as f:
        f.write((FIXTURES / "kmsg/disk-errors.txt").read_text() + (FIXTURES / "kmsg/not-disk-errors.txt").read_text())
    assert kernel_errors() == {**dict.fromkeys(["md0", "sda", "sdc", "sdd", "vda"], 0), "sdb": 5}
    assert kernel_errors()["sdb"] == 5  # read once

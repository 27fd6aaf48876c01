import pytest
from tests.collectors.golden import fixture_root

from kdiag.collectors.host.blockerrors import BlockErrorsCollector, parse_count


def test_scsi_error_counts_in_hex_and_md_members_by_disk():
    got = {(s.name, tuple(sorted(s.labels))): s.value for s in BlockErrorsCollector().collect(fixture_root("slow-broker-v2"))}
    assert got[("kdiag_disk_io_errors_total", (("device", "sdb"),))] == 26
    assert got[("kdiag_disk_io_errors_total", (("device", "sda"),))] == 0
    assert got[("kdiag_md_member_errors_total", (("device", "md0"), ("disk", "sdc"), ("member", "sdc1")))] == 3
    assert not any(dict(labels).get("device") == "vda" for _, labels in got)  # virtio counts nothing


def test_parse_count():
    assert parse_count("0x1a\n", "ioerr_cnt", base=16) == 26 and parse_count("3\n", "errors") == 3
    with pytest.raises(ValueError, match=r"^errors line 1: expected a count"):
        parse_count("many\n", "errors")


def test_no_sys_block_is_oserror():
    with pytest.raises(OSError):
        BlockErrorsCollector().collect(fixture_root("slow-broker-v1"))

import pytest
from tests.collectors.golden import assert_golden, fixture_root

from kdiag.collectors.host.diskstats import DiskstatsCollector, disk_samples, parse_diskstats
from kdiag.core.root import Root


@pytest.mark.parametrize("variant", ["host-vm2", "old-kernel"])
def test_golden(variant):
    assert_golden(f"diskstats-{variant}", DiskstatsCollector().collect(fixture_root(variant)))


def test_host_vm2_has_flush_fields_and_skips_loop_and_zram():
    samples = DiskstatsCollector().collect(fixture_root("host-vm2"))
    assert {dict(s.labels)["device"] for s in samples} == {"vda"}
    assert any(s.name == "kdiag_disk_flush_requests_total" for s in samples)


def test_old_kernel_14_fields_whole_devices_only():
    samples = DiskstatsCollector().collect(fixture_root("old-kernel"))
    assert {dict(s.labels)["device"] for s in samples} == {"sda", "sr0", "dm-0"}
    assert not any(s.name.startswith("kdiag_disk_flush") for s in samples)


def test_units():
    counters = parse_diskstats(" 8 0 sda 1 0 8 1500 2 0 16 250 3 4000 9000 0 0 0 0\n")["sda"]
    values = {s.name: s.value for s in disk_samples("sda", counters)}
    assert values["kdiag_disk_read_bytes_total"] == 4096
    assert values["kdiag_disk_read_time_seconds_total"] == 1.5
    assert values["kdiag_disk_io_now"] == 3
    assert "kdiag_disk_flush_requests_total" not in values  # 18 fields: discard but no flush


def test_wrong_field_count_names_file_and_line():
    with pytest.raises(ValueError, match=r"/proc/diskstats line 2: 6 fields"):
        parse_diskstats(" 8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n 8 1 sda1 1 2 3\n")


def test_missing_file_is_oserror(tmp_path):
    with pytest.raises(OSError):
        DiskstatsCollector().collect(Root(proc=tmp_path, sys=tmp_path))

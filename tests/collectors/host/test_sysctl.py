import shutil

import pytest
from tests.collectors.golden import FIXTURES, assert_golden, fixture_root

from kdiag.collectors.host.sysctl import SysctlCollector, sysctl_samples
from kdiag.core.root import Root


def test_golden():
    assert_golden("sysctl-host-vm2", SysctlCollector().collect(fixture_root("host-vm2")))


def test_host_vm2_reads_every_file():
    samples = SysctlCollector().collect(fixture_root("host-vm2"))
    assert {s.name for s in samples} == {"kdiag_sysctl", "kdiag_filefd_allocated", "kdiag_filefd_maximum"}
    assert len([s for s in samples if s.name == "kdiag_sysctl"]) == 6 + 2 * 3


def test_multi_value_gets_field_label():
    samples = sysctl_samples("net/ipv4/tcp_rmem", "4096\t131072\t6291456\n", "tcp_rmem")
    assert [dict(s.labels) for s in samples] == [{"name": "net.ipv4.tcp_rmem", "field": f} for f in ("min", "default", "max")]
    assert [s.value for s in samples] == [4096, 131072, 6291456]


def test_missing_one_is_skipped(tmp_path):
    shutil.copytree(FIXTURES / "host-vm2" / "proc" / "sys", tmp_path / "sys")
    (tmp_path / "sys" / "vm" / "swappiness").unlink()
    names = {dict(s.labels).get("name") for s in SysctlCollector().collect(Root(proc=tmp_path))}
    assert "vm.swappiness" not in names and "vm.dirty_ratio" in names


def test_none_readable_raises(tmp_path):
    with pytest.raises(OSError, match="no sysctl readable"):
        SysctlCollector().collect(Root(proc=tmp_path))


def test_malformed_value():
    with pytest.raises(ValueError, match="swappiness line 1"):
        sysctl_samples("vm/swappiness", "sixty\n", "/proc/sys/vm/swappiness")

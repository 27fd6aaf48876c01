import shutil

import pytest
from tests.collectors.golden import FIXTURES, assert_golden, fixture_root

from kdiag.collectors.host.netstat import NetstatCollector, parse_netstat
from kdiag.core.root import Root


def test_golden():
    assert_golden("netstat-host-vm2", NetstatCollector().collect(fixture_root("host-vm2")))


def test_parse_snmp_and_netstat():
    snmp = parse_netstat((FIXTURES / "host-vm2/proc/net/snmp").read_text(), "/proc/net/snmp")
    assert snmp["Tcp"]["MaxConn"] == -1
    assert {"Ip", "Icmp", "IcmpMsg", "Tcp", "Udp", "UdpLite"} <= set(snmp)
    netstat = parse_netstat((FIXTURES / "host-vm2/proc/net/netstat").read_text())
    assert {"TcpExt", "IpExt"} <= set(netstat)
    assert "ListenOverflows" in netstat["TcpExt"]


def test_missing_fields_are_skipped(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net/snmp").write_text("Tcp: ActiveOpens CurrEstab\nTcp: 5 3\n")
    (tmp_path / "net/netstat").write_text("TcpExt: ListenDrops\nTcpExt: 2\n")
    samples = NetstatCollector().collect(Root(proc=tmp_path, sys=tmp_path))
    assert {(s.name, s.value, s.kind) for s in samples} == {
        ("kdiag_netstat_Tcp_ActiveOpens_total", 5, "counter"),
        ("kdiag_netstat_Tcp_CurrEstab", 3, "gauge"),
        ("kdiag_netstat_TcpExt_ListenDrops_total", 2, "counter"),
    }


def test_column_mismatch_names_file_and_line(tmp_path):
    (tmp_path / "net").mkdir()
    shutil.copy(FIXTURES / "host-vm2/proc/net/snmp", tmp_path / "net/snmp")
    shutil.copy(FIXTURES / "faults/proc/net/netstat", tmp_path / "net/netstat")
    with pytest.raises(ValueError, match=r"^/proc/net/netstat line 4: 3 values for 4 IpExt fields"):
        NetstatCollector().collect(Root(proc=tmp_path, sys=tmp_path))


def test_protocol_mismatch_and_odd_lines():
    with pytest.raises(ValueError, match=r"^/proc/net/snmp line 2: "):
        parse_netstat("Tcp: A B\nUdp: 1 2\n", "/proc/net/snmp")
    with pytest.raises(ValueError, match=r"^/proc/net/netstat line 3: header line without a value line"):
        parse_netstat("Tcp: A\nTcp: 1\nUdp: B\n")


def test_missing_file_is_oserror():
    with pytest.raises(OSError):
        NetstatCollector().collect(fixture_root("missing"))

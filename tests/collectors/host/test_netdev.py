import pytest
from tests.collectors.golden import FIXTURES, assert_golden, fixture_root

from kdiag.collectors.host.netdev import NetdevCollector, parse_netdev

HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls"
    " carrier compressed\n"
)


def test_golden():
    assert_golden("netdev-host-vm2", NetdevCollector().collect(fixture_root("host-vm2")))


def test_parse_host_vm2_includes_lo():
    stats = parse_netdev((FIXTURES / "host-vm2/proc/net/dev").read_text())
    assert {"lo", "eth0"} <= set(stats)
    assert len(stats["eth0"]) == 16 and stats["eth0"]["transmit_carrier"] == 0


def test_long_name_without_space_after_colon():
    stats = parse_netdev(HEADER + "vethabcdef012345:12345678901 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n")
    assert stats["vethabcdef012345"]["receive_bytes"] == 12345678901
    assert stats["vethabcdef012345"]["transmit_compressed"] == 16


def test_short_line_names_file_and_line():
    with pytest.raises(ValueError, match=r"^/proc/net/dev line 3: expected `name: 16 counters`"):
        parse_netdev(HEADER + "  eth0: 1 2 3\n")


def test_missing_file_is_oserror():
    with pytest.raises(OSError):
        NetdevCollector().collect(fixture_root("missing"))

import pytest
from tests.collectors.golden import assert_golden, fixture_root

from kdiag.collectors.host.loadavg import LoadavgCollector, parse_loadavg


def test_golden():
    assert_golden("loadavg-host-vm2", LoadavgCollector().collect(fixture_root("host-vm2")))


def test_parse():
    assert parse_loadavg("0.39 0.13 0.04 1/86 3945\n") == (0.39, 0.13, 0.04)
    with pytest.raises(ValueError, match="line 1"):
        parse_loadavg("0.39\n")

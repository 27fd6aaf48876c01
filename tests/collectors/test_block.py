import pytest
from golden import assert_golden, fixture_root

from kdiag.collectors.block import BlockCollector, parse_rotational, parse_scheduler


@pytest.mark.parametrize("variant", ["host-vm2", "old-kernel"])
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

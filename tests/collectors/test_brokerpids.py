import shutil

from golden import FIXTURES

from kdiag.collectors.host.brokerpids import BrokerPids
from kdiag.core.root import Root

STATUS = "Name:\tjava\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n"


def test_another_users_kafka_look_alike_is_no_broker(tmp_path):
    shutil.copytree(FIXTURES / "slow-broker-v2/proc", tmp_path / "proc")
    root = Root(tmp_path / "proc", tmp_path / "sys")
    (tmp_path / "proc/4242/status").write_text(STATUS.format(uid=0))
    assert [b.pid for b in BrokerPids(owners={0, 998}).brokers(root)] == [4242]
    (tmp_path / "proc/4242/status").write_text(STATUS.format(uid=65534))
    assert BrokerPids(owners={0, 998}).brokers(root) == []
    assert [b.pid for b in BrokerPids().brokers(root)] == [4242]  # no owners given: anyone's (fixtures, tests)

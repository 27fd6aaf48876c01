import shutil

from tests.collectors.golden import FIXTURES

from kdiag.collectors.host.brokerpids import BrokerPids
from kdiag.core.brokertrust import BrokerTrust
from kdiag.collectors.host.processes import ProcessesCollector
from kdiag.core.root import Root

STATUS = "Name:\tjava\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n"
IO = ("rchar: 1000\nwchar: 2000\nsyscr: 10\nsyscw: 20\nread_bytes: 4096\nwrite_bytes: 8192\n"
      "cancelled_write_bytes: 0\n")


def test_another_users_kafka_look_alike_is_no_broker(tmp_path):
    shutil.copytree(FIXTURES / "slow-broker-v2/proc", tmp_path / "proc")
    root = Root(tmp_path / "proc", tmp_path / "sys")
    (tmp_path / "proc/4242/status").write_text(STATUS.format(uid=0))
    assert [b.pid for b in BrokerPids(trust=BrokerTrust("998")).brokers(root)] == [4242]
    (tmp_path / "proc/4242/status").write_text(STATUS.format(uid=65534))
    assert BrokerPids(trust=BrokerTrust("998")).brokers(root) == []
    assert [b.pid for b in BrokerPids().brokers(root)] == [4242]  # no owners given: anyone's (fixtures, tests)


def test_with_the_processes_collectors_table_the_brokers_are_the_ones_it_read(tmp_path):
    shutil.copytree(FIXTURES / "slow-broker-v2/proc", tmp_path / "proc")
    root = Root(tmp_path / "proc", tmp_path / "sys")
    (tmp_path / "proc/4242/status").write_text(STATUS.format(uid=0))
    (tmp_path / "proc/4242/io").write_text(IO)
    processes = ProcessesCollector(broker_user="kafka")
    brokers = BrokerPids(table=processes.table)
    assert brokers.brokers(root) == []  # nothing read yet
    processes.collect(root)
    assert [b.pid for b in brokers.brokers(root)] == [4242]
    (tmp_path / "proc/4242/status").write_text(STATUS.format(uid=65534))
    fresh = ProcessesCollector(broker_user="kafka")
    fresh.collect(root)
    assert BrokerPids(table=fresh.table).brokers(root) == []

import json
import time
from pathlib import Path

import pytest
from tests.collectors.golden import FIXTURES, assert_golden
from tests.waiting import wait_until

from kdiag.kafka.jmx_reader import parse_row
from kdiag.collectors.kafka.jmx import KafkaJmxCollector, canonical, jmx_url, samples_from_jmx_state
from kdiag.tools.lab.lab import read_lab
from kdiag.core.root import Root

STATE = FIXTURES / "kafka" / "jmx-state.json"


def test_golden():
    assert_golden("kafka-jmx-lab", samples_from_jmx_state(json.loads(STATE.read_text())))


def test_fixture_is_the_3_broker_lab():
    samples = samples_from_jmx_state(json.loads(STATE.read_text()))
    brokers = {"1", "2", "3"}
    assert [s.value for s in samples if s.name == "kdiag_kafka_jmx_up"] == [1.0, 1.0, 1.0]
    for name in ("kdiag_kafka_partitions", "kdiag_kafka_leaders", "kdiag_kafka_bytes_in_total", "kdiag_kafka_log_flushes_total"):
        assert set(by_broker(samples, name)) == brokers, name
    # Every broker hosts a controller (combined KRaft nodes), exactly one of them active.
    assert sorted(by_broker(samples, "kdiag_kafka_active_controller").values()) == [0.0, 0.0, 1.0]
    for request in ("Produce", "FetchConsumer"):
        for name in ("kdiag_kafka_requests_total", "kdiag_kafka_request_time_seconds", "kdiag_kafka_request_bytes"):
            found = {dict(s.labels)["broker_id"] for s in samples if s.name == name and ("request", request) in s.labels}
            assert found == brokers, (name, request)


def test_failed_endpoint_only_zeroes_its_up():
    state = json.loads(STATE.read_text())
    urls = sorted(state["endpoints"])
    dead = "service:jmx:rmi:///jndi/rmi://127.0.0.1:1/jmxrmi"
    state["endpoints"][urls[0]] = {"error": "refused"}
    state["endpoints"][dead] = {"error": "refused"}
    samples = samples_from_jmx_state(state)
    up = {dict(s.labels)["endpoint"]: s.value for s in samples if s.name == "kdiag_kafka_jmx_up"}
    assert up == {urls[0]: 0.0, dead: 0.0, **dict.fromkeys(urls[1:], 1.0)}
    # The brokers whose endpoint failed have no other series; the others keep theirs.
    live = {json.loads(STATE.read_text())["endpoints"][u]["broker_id"] for u in urls[1:]}
    assert set(by_broker(samples, "kdiag_kafka_partitions")) == live


def test_all_endpoints_failed_raises():
    with pytest.raises(RuntimeError, match="no JMX endpoint answered"):
        samples_from_jmx_state({"version": 1, "endpoints": {"u": {"error": "refused"}}})


def test_requests_summed_over_versions_and_key_order_ignored():
    values = {
        "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,version=9|Count": 2.0,
        "kafka.network:version=11,request=Produce,name=RequestsPerSec,type=RequestMetrics|Count": 3.0,
    }
    samples = samples_from_jmx_state({"version": 1, "endpoints": {"u": {"broker_id": "7", "values": values}}})
    produce = [s for s in samples if s.name == "kdiag_kafka_requests_total" and ("request", "Produce") in s.labels]
    assert [s.value for s in produce] == [5.0] and ("broker_id", "7") in produce[0].labels


def test_request_time_split_per_request_type():
    # Kafka's RequestMetrics object names: one histogram per phase and request type, FetchFollower apart from FetchConsumer.
    values = {f"kafka.network:type=RequestMetrics,name={name},request={request}|99thPercentile": ms
              for request, ms in (("Produce", 5.0), ("FetchFollower", 300.0), ("FetchConsumer", 2.0))
              for name in ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs", "ResponseSendTimeMs")}
    samples = samples_from_jmx_state({"version": 1, "endpoints": {"u": {"broker_id": "3", "values": values}}})
    times = {(dict(s.labels)["request"], dict(s.labels)["phase"]): s.value for s in samples
             if s.name == "kdiag_kafka_request_time_seconds"}
    assert len(times) == 15
    assert times["FetchFollower", "local"] == 0.3 and times["Produce", "response_send"] == 0.005


def test_parse_row_and_names():
    header = ["time", "kafka.server:type=ReplicaManager,name=LeaderCount:Value", "java.lang:name=G1,type=GarbageCollector:Name"]
    assert parse_row(header, ["1795978868063", "51", "G1"]) == {"kafka.server:type=ReplicaManager,name=LeaderCount|Value": 51.0}
    assert jmx_url("h:1") == "service:jmx:rmi:///jndi/rmi://h:1/jmxrmi"
    assert canonical("d:type=a,name=b") == "d:name=b,type=a"


def lab_endpoints() -> list[str]:
    lab = read_lab()
    if not lab:
        pytest.skip("the Kafka lab is not running (kdiag lab up --brokers 3)")
    return [lab["jmx"][n] for n in sorted(lab["jmx"], key=int)]


@pytest.fixture
def lab_collector():
    collector = KafkaJmxCollector(lab_endpoints(), timeout=20.0, poll_interval=1.0)
    yield collector
    collector.close()


def by_broker(samples, name):
    return {dict(s.labels)["broker_id"]: s.value for s in samples if s.name == name}


@pytest.mark.kafka
def test_live_values_for_every_broker(lab_collector):
    samples = lab_collector.collect(Root())
    brokers = {str(n) for n in range(1, len(lab_collector.urls) + 1)}
    assert {s.value for s in samples if s.name == "kdiag_kafka_jmx_up"} == {1.0}
    for name in ("kdiag_kafka_request_handler_idle_ratio", "kdiag_kafka_partitions", "kdiag_kafka_bytes_in_total",
                 "kdiag_kafka_replica_fetch_max_lag", "kdiag_kafka_produce_purgatory_size"):
        assert set(by_broker(samples, name)) == brokers, name
    assert all(0.0 <= v <= 1.0 for v in by_broker(samples, "kdiag_kafka_request_handler_idle_ratio").values())


@pytest.mark.kafka
def test_ready_only_when_a_row_came_since_the_last_fetch():
    collector = KafkaJmxCollector(lab_endpoints()[:1], timeout=20.0, poll_interval=2.0)
    try:
        assert collector.ready()  # no reader yet: the first fetch starts it
        collector.fetch()
        seen = collector.readers[collector.urls[0]].latest
        assert seen is not None and not collector.ready()  # that row was handed over
        wait_until(collector.ready, 30, "JmxTool's next row")
        assert collector.readers[collector.urls[0]].latest is not seen
        collector.fetch()
        assert not collector.ready()
    finally:
        collector.close()


@pytest.mark.kafka
def test_live_bytes_in_grows_when_producing(lab_collector):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    before = sum(by_broker(lab_collector.collect(Root()), "kdiag_kafka_bytes_in_total").values())
    producer = confluent_kafka.Producer({"bootstrap.servers": read_lab()["bootstrap"]})
    for i in range(3000):
        producer.produce("kdiag-jmx-test", value=b"x" * 100, key=str(i).encode())
        producer.poll(0)
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        after = sum(by_broker(lab_collector.collect(Root()), "kdiag_kafka_bytes_in_total").values())
        if after >= before + 300_000:
            break
        time.sleep(1)
    assert after >= before + 300_000


@pytest.mark.kafka
def test_live_closed_port_only_zeroes_that_endpoint():
    collector = KafkaJmxCollector([*lab_endpoints(), "127.0.0.1:1"], timeout=15.0, poll_interval=1.0)
    try:
        samples = collector.collect(Root())
    finally:
        collector.close()
    up = {dict(s.labels)["endpoint"]: s.value for s in samples if s.name == "kdiag_kafka_jmx_up"}
    assert up.pop(jmx_url("127.0.0.1:1")) == 0.0
    assert set(up.values()) == {1.0}


@pytest.mark.kafka
def test_live_all_dead_raises_within_timeout():
    lab_endpoints()
    collector = KafkaJmxCollector(["127.0.0.1:1", "127.0.0.1:2"], timeout=3.0)
    start = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="no JMX endpoint answered"):
            collector.collect(Root())
    finally:
        collector.close()
    assert time.monotonic() - start < 3.0 + 5


def capture(path: Path = STATE) -> None:
    """Write the fixture: one fetch of the 3-broker lab's JMX, after traffic through a jmxtest-* topic led by every broker."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    lab = read_lab()
    assert lab and lab["brokers"] == 3, "run `kdiag lab up --brokers 3` first"
    bootstrap, topic = lab["bootstrap"], "jmxtest-capture"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(30)
    try:
        # Produce and consume so every broker has registered its Produce and FetchConsumer request MBeans.
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(3000):
            producer.produce(topic, key=str(i).encode(), value=b"x" * 100)
            producer.poll(0)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "jmxtest-capture", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got, deadline = 0, time.monotonic() + 30
        while got < 3000 and time.monotonic() < deadline:
            got += len(consumer.consume(500, timeout=1))
        consumer.close()
        collector = KafkaJmxCollector([lab["jmx"][n] for n in sorted(lab["jmx"], key=int)], timeout=20.0, poll_interval=1.0)
        try:
            state = collector.fetch()
        finally:
            collector.close()
    finally:
        admin.delete_topics([topic])[topic].result(30)
        admin.delete_consumer_groups(["jmxtest-capture"])["jmxtest-capture"].result(30)
    assert all("values" in e for e in state["endpoints"].values()), state
    path.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    capture()

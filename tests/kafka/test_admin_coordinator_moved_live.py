"""A group whose coordinator moved to another broker for real (a preferred-leader election of its `__consumer_offsets`
partition): the admin state describes it again within a few fetches (librdkafka re-finds the coordinator of a
DescribeGroups answered NOT_COORDINATOR; its ConsumerGroupDescribe, which the election's look sends, does not: see
test_coordination_live)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.coordinator_move import coordinator_moved
from tests.waiting import wait_until

from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.kafka.admin import KafkaAdminError

pytestmark = pytest.mark.kafka


def test_an_active_group_whose_coordinator_moved_is_described_again(kafka_lab):
    bootstrap, tag = kafka_lab["bootstrap"], f"moved-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(tag, 1, 1)])[tag].result(timeout=30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": tag, "session.timeout.ms": 6000})
    consumer.subscribe([tag])
    collector = KafkaAdminCollector(bootstrap, timeout=10.0)  # the AdminClient in its own process, as in the daemon
    pids = set()

    def stable() -> bool:
        consumer.poll(0.2)  # the member's heartbeats (it finds the moved coordinator by itself)
        pids.add(collector.worker.pid())
        try:
            group = collector.fetch()["consumer_groups"].get(tag)
        except KafkaAdminError:  # the AdminClient process restarting
            return False
        return group is not None and group["state"] == "STABLE" and group["members"] == 1

    try:
        wait_until(stable, 60, f"group {tag} described, one member")
        with coordinator_moved(bootstrap, tag) as broker:
            misses = 0

            def stable_again() -> bool:
                nonlocal misses
                found = stable()
                misses += not found
                return found

            wait_until(stable_again, 60, f"group {tag} described again after its coordinator moved to {broker}")
            print(f"\ncoordinator moved to broker {broker}: {misses} fetch(es) without the group, "
                  f"{len(pids - {None}) - 1} AdminClient process(es) replaced")
    finally:
        collector.close()
        consumer.close()
        admin.delete_topics([tag])[tag].exception(timeout=30)
        admin.delete_consumer_groups([tag], request_timeout=30)[tag].exception(timeout=30)

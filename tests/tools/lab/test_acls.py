"""The sasl_ssl lab's authorizer (kdiag/tools/lab/acls.py): kdiag's principal, with only the ACLs of docs/ACLS.md,
elects a reporter and publishes its state; a principal without them (`intruder`) is refused on kdiag's topics and
group. The daemon's admin, JMX and probe collectors under the same ACLs: test_kafka_client_live.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient
from tests.kafka.test_coordination_live import published_by, state
from tests.waiting import wait_until

from kdiag.config.settings import load_config
from kdiag.kafka.coordination import STATE_SUFFIX, Coordinator
from kdiag.kafka.coordination_records import Member
from kdiag.tools.lab import security as lab_security

pytestmark = pytest.mark.kafka
TOPIC, GROUP = "__kdiag_coordination", "kdiag-coordination"  # the defaults docs/ACLS.md grants


def intruder(secure_lab: dict) -> dict:
    """The lab's client settings as the SCRAM user without ACLs."""
    password = (lab_security.secrets_dir(Path(secure_lab["dir"])) / f"{lab_security.INTRUDER}.password").read_text()
    return {**secure_lab["client"], "sasl.username": lab_security.INTRUDER, "sasl.password": password.strip()}


def test_kdiags_principal_coordinates_with_the_documented_acls(secure_lab: dict) -> None:
    settings = load_config(secure_lab["config"]).kafka.client_settings
    coordinator = Coordinator(secure_lab["bootstrap"], settings, Member("acl-host", 1), TOPIC, GROUP,
                              rule_ids=frozenset({"broker_down"}))
    coordinator.start()
    try:
        wait_until(lambda: coordinator.reporting().why == "elected", 120, "kdiag's principal elected")
        coordinator.publish(state("with-acls"))
        wait_until(lambda: published_by(coordinator) == "with-acls", 60, "its state record read back")
        assert not coordinator.problem
    finally:
        coordinator.stop()


def test_a_principal_without_the_acls_is_refused_on_kdiags_topics_and_group(secure_lab: dict) -> None:
    conf = intruder(secure_lab)
    wait_until(lambda: TOPIC + STATE_SUFFIX in AdminClient(secure_lab["client"]).list_topics(timeout=10).topics, 120,
               "the coordination topics (made by the test above or a daemon)")
    errors: list[KafkaError] = []
    producer = Producer({**conf, "message.timeout.ms": 10000, "error_cb": errors.append})
    delivered: list[KafkaError | None] = []
    producer.produce(TOPIC + STATE_SUFFIX, key=GROUP.encode(), value=b"{}", on_delivery=lambda e, _m: delivered.append(e))
    producer.flush(30)
    assert delivered and delivered[0] is not None
    assert delivered[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, delivered[0]
    consumer = Consumer({**conf, "group.id": GROUP, "session.timeout.ms": 6000})
    consumer.subscribe([TOPIC])
    try:
        def refused() -> KafkaError | None:
            message = consumer.poll(1.0)
            return message.error() if message is not None and message.error() else None

        error = wait_until(refused, 60, "the intruder's join refused")
        assert error.code() in (KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED), error
    finally:
        consumer.close()
    # Nor can it see them: metadata leaves out topics a principal may not describe.
    assert not {TOPIC, TOPIC + STATE_SUFFIX} & set(AdminClient(conf).list_topics(timeout=10).topics)

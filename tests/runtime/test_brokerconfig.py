"""A broker's settings from its files, command line and a container image's environment."""

from __future__ import annotations

import pytest

from kdiag.runtime.brokerconfig import env_setting, env_settings


@pytest.mark.parametrize(("name", "setting"), [
    ("KAFKA_LOG_DIRS", "log.dirs"), ("KAFKA_CFG_LOG_DIRS", "log.dirs"), ("KAFKA_NODE_ID", "node.id"),
    ("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "listener.security.protocol.map"),
    ("KAFKA_CONFLUENT___SUPPORT___X", "confluent-support-x"), ("KAFKA_A__B_C", "a_b.c"),
])
def test_an_environment_variable_names_its_setting_as_the_images_do(name, setting):
    assert env_setting(name) == setting


def test_only_the_settings_discovery_uses_are_kept_and_bitnamis_form_wins():
    environ = "\0".join(["KAFKA_CFG_LOG_DIRS=/bitnami/kafka/data", "KAFKA_LOG_DIRS=/var/lib/kafka/data",
                         "KAFKA_NODE_ID=3", "KAFKA_SSL_KEYSTORE_PASSWORD=s3cret", "KAFKA_OPTS=-Dx=s3cret",
                         "KAFKA_HEAP_OPTS=-Xmx1G", "PATH=/bin", "KAFKA_LISTENERS"]) + "\0"
    assert env_settings(environ) == {"log.dirs": "/bitnami/kafka/data", "node.id": "3"}

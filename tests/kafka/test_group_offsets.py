"""Which kafka.client settings the batched OffsetFetch reader takes over, and why it refuses the others."""

from __future__ import annotations

from kdiag.kafka.client import ClientSettings
from kdiag.kafka.group_offsets import BatchedReads, batch_settings


def test_the_labs_sasl_ssl_settings_translate(tmp_path):
    password = tmp_path / "kdiag.password"
    password.write_text("s3cret-pw\n")
    settings = ClientSettings.resolve({"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
                                       "sasl.username": "kdiag", "sasl.password_file": str(password),
                                       "ssl.ca.location": "/etc/kdiag/ca.crt",
                                       "ssl.endpoint.identification.algorithm": "none"})
    conf = batch_settings(settings, "b1:9093,b2:9093", 7.5)
    assert conf == {"bootstrap_servers": ["b1:9093", "b2:9093"], "client_id": "kdiag", "request_timeout_ms": 7500,
                    "max_in_flight_requests_per_connection": 32, "receive_message_max_bytes": 100_000_000,
                    "security_protocol": "SASL_SSL",
                    "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "kdiag",
                    "sasl_plain_password": "s3cret-pw", "ssl_cafile": "/etc/kdiag/ca.crt",
                    "ssl_check_hostname": False}


def test_a_property_without_equivalent_is_named_and_its_value_never_said(caplog):
    settings = ClientSettings.resolve({"security.protocol": "ssl", "ssl.keystore.location": "/k.p12",
                                       "ssl.keystore.password": "hunter2-secret"})
    reason = batch_settings(settings, "b1:9093", 5)
    assert reason == "kafka.client.ssl.keystore.location has no kafka-python equivalent"
    caplog.set_level("INFO", "kdiag.kafka.group_offsets")
    batched = BatchedReads(settings, "b1:9093", 5)
    assert batched.read(["g1", "g2"], 0.0, lambda g, read: None) == set() and batched.client is None
    assert batched.read(["g1"], 0.0, lambda g, read: None) == set()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["committed offsets: one OffsetFetch a group, as kafka.client.ssl.keystore.location has no "
                     "kafka-python equivalent"]  # said once
    assert "hunter2" not in caplog.text


def test_gssapi_and_oauthbearer_stay_with_librdkafka():
    for mechanism in ("GSSAPI", "OAUTHBEARER"):
        reason = batch_settings(ClientSettings.resolve({"security.protocol": "sasl_ssl", "sasl.mechanism": mechanism}),
                                "b1:9093", 5)
        assert reason == f"sasl.mechanism {mechanism} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"

"""The secure_lab fixture against the CI's running sasl_ssl lab (see conftest.secure_lab)."""

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

pytestmark = pytest.mark.kafka


def test_secure_lab_gives_working_client_settings_and_private_secrets(secure_lab):
    assert secure_lab["security"] == "sasl_ssl"
    assert secure_lab["password"] not in Path(secure_lab["config"]).read_text()
    admin = AdminClient(secure_lab["client"])
    nodes = admin.describe_cluster(request_timeout=15).result(timeout=20).nodes
    assert [n.id for n in nodes] == [1]
    with pytest.raises(Exception, match="Failed to get metadata"):
        AdminClient({"bootstrap.servers": secure_lab["bootstrap"], "log_level": 0}).list_topics(timeout=5)

"""Tests of the JmxTool reader's endpoint forms."""

import pytest

from kdiag.collectors.kafka.jmx import jmx_url
from kdiag.kafka.jmx_reader import split_netns

pytestmark = pytest.mark.unit


def test_an_endpoint_may_name_the_process_whose_network_namespace_it_is_in() -> None:
    assert split_netns("127.0.0.1:9999@netns:4242") == ("127.0.0.1:9999", 4242)
    assert split_netns("127.0.0.1:9999") == ("127.0.0.1:9999", None)
    assert jmx_url("127.0.0.1:9999@netns:42") == "service:jmx:rmi:///jndi/rmi://127.0.0.1:9999/jmxrmi@netns:42"


@pytest.mark.parametrize("endpoint", ["h:1@netns:0", "h:1@netns:-1", "h:1@netns:1/../../x", "h:1@netns:",
                                      "h:1@netns:12345678901"])
def test_anything_but_a_plain_pid_is_no_namespace(endpoint: str) -> None:
    assert split_netns(endpoint) == (endpoint, None)

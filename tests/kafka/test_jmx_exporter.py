"""The jmx_exporter agent's exposition mapped to JmxTool's keys: the same MBeans from a real agent's output (Kafka
4.4.0, jmx_prometheus_javaagent 1.0.1, captured on the --containers lab), and hostile text refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kdiag.collectors.kafka import jmx
from kdiag.collectors.kafka.jmx import ATTRIBUTES, QUERIES, broker_id
from kdiag.kafka.jmx_exporter import ExporterReader, parse_exposition, to_values
from tests.paths import FIXTURES
from tests.waiting import wait_until

TEXT = (FIXTURES / "kafka" / "jmx-exporter-4.4.0.txt").read_text()


@pytest.mark.unit
def test_the_agents_names_map_to_the_mbeans_jmxtool_read_from_the_same_broker() -> None:
    values = to_values(parse_exposition(TEXT), QUERIES, ATTRIBUTES)
    jmxtool = json.loads((FIXTURES / "kafka" / "jmx-exporter-4.4.0.jmxtool-keys.json").read_text())
    assert sorted(f"{m}|{a}" for m, a in jmx._index(values)) == jmxtool
    assert broker_id(values) == "1"
    assert values["kafka.log:name=LogFlushRateAndTimeMs,type=LogFlushStats|Count"] == 171.0
    assert values["java.lang:name=Copy,type=GarbageCollector|CollectionCount"] == 35.0


@pytest.mark.unit
def test_either_key_order_of_the_agent_maps_to_the_same_mbean() -> None:
    for line in ('java_lang_Copy_CollectionTime{type="GarbageCollector"} 7.0',
                 'java_lang_GarbageCollector_CollectionTime{name="Copy"} 7.0'):
        assert to_values(parse_exposition(line), QUERIES, ATTRIBUTES) == {
            "java.lang:name=Copy,type=GarbageCollector|CollectionTime": 7.0}
    # app-info's value is made safe in the name (app_info): the query's own value is restored.
    assert to_values(parse_exposition('kafka_server_app_info_StartTimeMs{id="3"} 1.0'), QUERIES, ATTRIBUTES) == {
        "kafka.server:id=3,type=app-info|StartTimeMs": 1.0}


@pytest.mark.unit
def test_what_kdiag_does_not_ask_for_is_left_out() -> None:
    text = ('kafka_server_BrokerTopicMetrics_Count{name="MessagesInPerSec",topic="t"} 5.0\n'  # a topic's, not the total
            'kafka_server_ReplicaManager_Value{name="Nope"} 1.0\n'
            'kafka_server_BrokerTopicMetrics_Count{name="MessagesInPerSec"} NaN\n'
            'kafka_log_LogFlushStats_Count{name="LogFlushRateAndTimeMs"} +Inf\n')
    assert to_values(parse_exposition(text), QUERIES, ATTRIBUTES) == {}


@pytest.mark.unit
@pytest.mark.parametrize("line", [
    'kafka_x{name="a} 1', 'kafka_x{name=a} 1', "kafka_x 1 2 3", "kafka x 1", 'kafka_x{name="a"}1', "kafka_x one",
    "9kafka 1", 'kafka_x{name="a",,} 1', "kafka_x " + "1" * 70000,
])
def test_a_malformed_line_fails_the_scrape_naming_it(line: str) -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_exposition("# HELP fine\n" + line + "\n")


@pytest.mark.unit
def test_lines_outside_the_wanted_prefixes_are_never_read() -> None:
    text = 'kafka_server_ReplicaManager_Value{name="LeaderCount"} 4.0\nother_metric{broken 1\n'
    assert parse_exposition(text, ("kafka_server_",)) == [("kafka_server_ReplicaManager_Value", {"name": "LeaderCount"}, 4.0)]
    with pytest.raises(ValueError, match="line 2"):
        parse_exposition(text)


@pytest.mark.unit
def test_escapes_in_label_values_are_read_as_the_format_says() -> None:
    ((_, labels, _),) = parse_exposition('x{a="q\\"\\\\\\n"} 1')
    assert labels == {"a": 'q"\\\n'}


class Agent(BaseHTTPRequestHandler):
    body = b""
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def agent() -> Iterator[tuple[str, type[Agent]]]:
    handler = type("AgentHandler", (Agent,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
def test_the_reader_polls_the_agent_and_keeps_its_error(agent: tuple[str, type[Agent]]) -> None:
    url, handler = agent
    handler.body = TEXT.encode()
    reader = ExporterReader(url, 0.2, QUERIES, ATTRIBUTES, timeout=5)
    try:

        values = reader.wait_row(time.monotonic() + 10, 10)
        assert values and broker_id(values) == "1" and len(values) == 120
    finally:
        reader.close()
    handler.body = b'kafka_server_x{name="unterminated} 1\n'
    reader = ExporterReader(url, 0.2, QUERIES, ATTRIBUTES, timeout=5)
    try:

        assert reader.wait_row(time.monotonic() + 1, 10) is None
        assert "line 1" in reader.error
    finally:
        reader.close()


def row_or_error(reader: ExporterReader) -> dict[str, float] | None:
    """The reader's latest row; its error raised while it has none, so that a wait that times out says what it was."""
    row = reader.wait_row(time.monotonic() + 1, 10)
    if row is None and reader.error:
        raise ValueError(reader.error)
    return row


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="a network namespace needs root")
def test_an_agent_on_another_network_namespaces_loopback_is_read_from_inside_it(tmp_path) -> None:
    (tmp_path / "metrics").write_text(TEXT)
    port = 17071
    server = subprocess.Popen(["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "serve",
                               sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(tmp_path),
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    inside = outside = None
    try:
        # unshare's own command line names http.server too: wait for the namespace, not the name
        wait_until(lambda: os.readlink(f"/proc/{server.pid}/ns/net") != os.readlink("/proc/self/ns/net"), 30,
                   "the server's own network namespace")
        inside = ExporterReader(f"{url}@netns:{server.pid}", 0.2, QUERIES, ATTRIBUTES, timeout=5)
        values = wait_until(lambda: row_or_error(inside), 30, "the agent's values from inside")
        assert values and broker_id(values) == "1" and len(values) == 120
        outside = ExporterReader(url, 0.2, QUERIES, ATTRIBUTES, timeout=2)  # this host's loopback has no such port
        wait_until(lambda: outside.error, 30, "the plain reader's error")
        assert outside.latest is None
    finally:
        for reader in (inside, outside):
            if reader is not None:
                reader.close()
        server.kill()
        server.wait()


@pytest.mark.integration
def test_a_reader_that_cannot_join_the_namespace_says_so() -> None:
    reader = ExporterReader("http://127.0.0.1:1/metrics@netns:999999999", 0.2, QUERIES, ATTRIBUTES, timeout=1)
    reader.close()
    assert not reader.alive() and "cannot join the network namespace of pid 999999999" in reader.error

"""A restarted ZooKeeper-mode lab waits out a killed broker's registration, read from ZooKeeper's dump."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator

import pytest

from kdiag.tools.lab import zookeeper as lab_zookeeper
from kdiag.tools.lab.jars import LabError

pytestmark = pytest.mark.integration

# ZooKeeper 3.8.4's (Kafka 3.7.2's) answers: while it loads its data, and once it serves with broker 1's session.
NOT_SERVING = "This ZooKeeper instance is not currently serving requests\n"
HELD = ("SessionTracker dump:\nSession Sets (3)/(1):\n0 expire at Sun Dec 06 19:44:13 UTC 2026:\n"
        "1 expire at Sun Dec 06 19:44:21 UTC 2026:\n\t0x1000274aec30000\nephemeral nodes dump:\n"
        "Sessions with Ephemerals (1):\n0x1000274aec30000:\n\t/controller\n\t/brokers/ids/1\nConnections dump:\n"
        "Connections Sets (2)/(2):\n0 expire at Sun Dec 06 19:44:13 UTC 2026:\n"
        "\tip: /127.0.0.1:36650 sessionId: 0x1000274aec30000\n")
RELEASED = ("SessionTracker dump:\nSession Sets (0)/(0):\nephemeral nodes dump:\nSessions with Ephemerals (0):\n"
            "Connections dump:\nConnections Sets (0)/(0):\n")


@pytest.fixture
def zookeeper() -> Iterator[tuple[int, list[str]]]:
    """A loopback server answering each four-letter word with the next scripted answer (the last one repeats)."""
    answers: list[str] = []

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(4)
            self.request.sendall((answers.pop(0) if len(answers) > 1 else answers[0]).encode())

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield server.server_address[1], answers
        server.shutdown()


def test_registered_reads_the_brokers_from_the_dump(zookeeper):
    port, answers = zookeeper
    answers[:] = [NOT_SERVING, HELD, RELEASED]
    assert lab_zookeeper.registered(port) is None
    assert lab_zookeeper.registered(port) == {1}
    assert lab_zookeeper.registered(port) == set()


def test_a_broker_starts_once_its_old_registration_expired(zookeeper):
    port, answers = zookeeper
    answers[:] = [NOT_SERVING, HELD, HELD, RELEASED]
    lab_zookeeper.wait_unregistered(port, 1, timeout=60)
    assert answers == [RELEASED]
    answers[:] = [HELD]
    lab_zookeeper.wait_unregistered(port, 2, timeout=60)  # broker 1's registration does not hold broker 2


def test_a_registration_that_stays_is_named(zookeeper):
    port, answers = zookeeper
    answers[:] = [HELD]
    with pytest.raises(LabError, match="still holds broker 1's registration"):
        lab_zookeeper.wait_unregistered(port, 1, timeout=1)

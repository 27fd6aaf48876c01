"""Where the lab keeps its files and ports, and the server.properties each of its nodes runs with."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from kdiag.tools.lab import acls as lab_acls
from kdiag.tools.lab import security as lab_security

KAFKA_VERSION = "4.4.0"
DEFAULT_BASE_PORT = 9092


def ports(node: int, base: int = DEFAULT_BASE_PORT) -> dict[str, int]:
    """Return the client, controller and JMX ports of a node."""
    block = base + 10 * (node - 1)
    return {"client": block, "controller": block + 1, "jmx_port": block + 907}


def zookeeper_port(base: int = DEFAULT_BASE_PORT) -> int:
    """The client port of a ZooKeeper-mode lab's one ZooKeeper node (node 1's unused controller port + 1)."""
    return base + 2


def jmx_url(port: int) -> str:
    """Return the JMX service URL for a loopback port."""
    return f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"


def new_cluster_id() -> str:
    """Return a random Kafka cluster id (base64url of 16 bytes, as StorageTool random-uuid does)."""
    while True:
        cid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cid.startswith("-"):  # Kafka refuses ids that look like options
            return cid


def server_properties(n: int, brokers: int, base: int, node_dir: Path, security: str, mode: str = "kraft") -> str:
    """server.properties of node n: in KRaft broker and controller in one process with static voters;
    in ZooKeeper mode broker.id and zookeeper.connect."""
    p = ports(n, base)
    if mode == "zookeeper":
        lines = [
            f"broker.id={n}",
            f"zookeeper.connect=127.0.0.1:{zookeeper_port(base)}",
            *lab_security.listener_lines(node_dir.parent, security, p["client"], None),
        ]
    else:
        voters = ",".join(f"{i}@127.0.0.1:{ports(i, base)['controller']}" for i in range(1, brokers + 1))
        lines = [
            "process.roles=broker,controller",
            f"node.id={n}",
            f"controller.quorum.voters={voters}",
            *lab_security.listener_lines(node_dir.parent, security, p["client"], p["controller"]),
        ]
    if lab_security.sasl(security):
        lines += lab_acls.authorizer_lines(mode == "zookeeper")
    lines += [f"log.dirs={node_dir / 'data'}", "group.initial.rebalance.delay.ms=0"]
    rf, isr = (1, 1) if brokers == 1 else (3, 2)
    lines += [
        f"offsets.topic.replication.factor={rf}",
        f"transaction.state.log.replication.factor={rf}",
        f"transaction.state.log.min.isr={isr}",
    ]
    if mode == "kraft":
        lines += [f"share.coordinator.state.topic.replication.factor={rf}", f"share.coordinator.state.topic.min.isr={isr}"]
    return "\n".join(lines) + "\n"

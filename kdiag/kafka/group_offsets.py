"""Committed offsets of many consumer groups in one OffsetFetch per coordinator (KIP-709, Kafka 3.0+).

librdkafka's admin API reads one group per call: a FindCoordinator and an OffsetFetch for each of 10,000 groups every
fetch. kafka-python's protocol classes take many groups a request, so this sends one batched FindCoordinator (KIP-699)
for the groups whose coordinator is not known yet and one OffsetFetch per coordinator and BATCH_GROUPS groups; the
same client asks log end offsets (kafka/end_offsets.py), every topic's partitions (kafka/metadata_answer.py) and the
configs kdiag reads, by name (kafka/configs.py).
It is used when the `kafka.client` properties translate to kafka-python's settings and the brokers answer
OffsetFetch v8; the groups it could not read in a fetch (their coordinator moved or is loading) are read the old way.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from kdiag.kafka.client import ClientSettings
from kdiag.kafka.configs import Configs, take_answer
from kdiag.kafka.configs import requests as config_requests
from kdiag.kafka.end_offsets import PARTITIONS_PER_REQUEST, VERSION, EndOffsets, requests
from kdiag.kafka.metadata_answer import request as metadata_request
from kdiag.kafka.offset_fetch_answer import fast_offset_fetch, GroupAnswer
from kdiag.kafka.state import Topic

log = logging.getLogger(__name__)

# Groups per OffsetFetch, and requests in flight: a fetch holds at most IN_FLIGHT answers (kafka-python's receive buffer
# grows to the largest), not every group's at once.
BATCH_GROUPS = 200
IN_FLIGHT = 3
FIND_GROUPS = 2000  # groups per FindCoordinator
CONNECT_MS = 3000  # how long a leader gets to be connected to before its partitions are left to the next fetch
# librdkafka property -> kafka-python setting, for the properties whose meaning is the same in both.
TRANSLATED = {"security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
              "sasl.mechanisms": "sasl_mechanism", "sasl.username": "sasl_plain_username",
              "sasl.password": "sasl_plain_password", "ssl.ca.location": "ssl_cafile",
              "ssl.certificate.location": "ssl_certfile", "ssl.key.location": "ssl_keyfile",
              "ssl.key.password": "ssl_password"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# The group's coordinator moved, is loading it or is down: ask FindCoordinator again next fetch.
COORDINATOR_ERRORS = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR

# Takes one group's committed offsets as read: (topic, partition, offset) of every committed partition.
Put = Callable[[str, Iterable[tuple[str, int, int]]], None]
T = TypeVar("T")


def batch_settings(settings: ClientSettings, bootstrap: str, timeout: float) -> dict[str, Any] | str:
    """kafka-python's settings for these kafka.client properties, or why they do not translate (names, no values)."""
    conf: dict[str, Any] = {"bootstrap_servers": bootstrap.split(","), "client_id": "kdiag",
                            "request_timeout_ms": int(timeout * 1000), "max_in_flight_requests_per_connection": 32,
                            # kafka-python's default limit is 1 MB: 500 groups of 100 partitions. librdkafka's default.
                            "receive_message_max_bytes": 100_000_000}
    for prop, value in settings.props.items():
        if prop == "ssl.endpoint.identification.algorithm" and value in ("none", "https"):
            conf["ssl_check_hostname"] = value == "https"
        elif prop not in TRANSLATED:
            return f"kafka.client.{settings.given.get(prop, prop)} has no kafka-python equivalent"
        else:
            conf[TRANSLATED[prop]] = value.upper() if prop in ("security.protocol", "sasl.mechanism",
                                                               "sasl.mechanisms") else value
    if conf.get("sasl_mechanism", "PLAIN") not in MECHANISMS:
        return f"sasl.mechanism {conf['sasl_mechanism']} is not one of {', '.join(MECHANISMS)}"
    return conf


class BatchedReads:
    """Reads through kafka-python's client and kdiag's codecs (committed offsets, end offsets, topics, configs) when
    they can be had: the client settings translate and the brokers answer OffsetFetch v8. A failed read returns nothing
    (the caller reads the old way, through librdkafka) and is logged; whether they can be had is logged once."""

    def __init__(self, settings: ClientSettings, bootstrap: str, timeout: float):
        conf = batch_settings(settings, bootstrap, timeout)
        self.settings = settings
        self.client = GroupOffsetsClient(conf) if isinstance(conf, dict) else None
        self.refusal = conf if isinstance(conf, str) else None
        self._checked = False
        self._warned = ""

    @property
    def usable(self) -> bool:
        """Whether batched reads can be had here (a failed one is retried at the next fetch)."""
        return self.client is not None

    def read(self, groups: list[str], deadline: float, put: Put) -> set[str]:
        """Give `put` the committed offsets of each group a batched read answered, as it is read; the groups answered
        (none when no batched read could be had; those answered before a failure when one failed)."""
        answered: set[str] = set()
        if groups:
            self._use(deadline, "committed offsets by batched OffsetFetch failed, the groups it did not read are read "
                      "at the next fetch (a few with a request each meanwhile)",
                      lambda client: client.fetch(groups, deadline, put, answered))
        return answered

    def end_offsets(self, by_leader: dict[int, list[tuple[str, int]]], deadline: float) -> EndOffsets | None:
        """Log end offsets of these partitions, each leader's asked in ListOffsets of many partitions; None when no
        batched read could be had or it failed (the caller asks librdkafka)."""
        return self._use(deadline, "log end offsets by batched ListOffsets failed, librdkafka's consumer asks them",
                         lambda client: client.end_offsets(by_leader, deadline))

    def topics(self, deadline: float) -> dict[str, Topic] | None:
        """Every topic's partitions from one Metadata answer kdiag decodes; None when no batched read could be had or
        it failed (the caller asks librdkafka)."""
        return self._use(deadline, "topics by Metadata failed, librdkafka's admin client asks them",
                         lambda client: client.topics(deadline))

    def configs(self, topics: list[str], brokers: list[int], deadline: float) -> Configs | None:
        """The wanted configs of these topics and brokers, asked by name; None when no batched read could be had or it
        failed (the caller asks librdkafka)."""
        return self._use(deadline, "configs by named DescribeConfigs failed, librdkafka's admin client asks them",
                         lambda client: client.configs(topics, brokers, deadline))

    def _use(self, deadline: float, failed: str, read: Callable[[GroupOffsetsClient], T]) -> T | None:
        """read(client) when batched reads can be had; None when not, or when it failed (logged as `failed` and why,
        the client closed)."""
        if (client := self.client) is None:
            self._say()
            return None
        try:
            if not self._checked:
                if not client.supported(deadline):
                    client.close()
                    self.client, self.refusal = None, "the brokers do not answer OffsetFetch v8 (Kafka 3.0+)"
                    self._say()
                    return None
                self._checked = True
                log.info("committed offsets: one OffsetFetch per coordinator and %d groups (KIP-709); log end offsets: "
                         "one ListOffsets per leader and %d partitions; topics: Metadata read by kdiag; configs: "
                         "asked by name",
                         BATCH_GROUPS, PARTITIONS_PER_REQUEST)
            value = read(client)
            self._warned = ""
            return value
        except Exception as e:  # any failure of kafka-python's: the caller reads the old way
            client.close()
            if (reason := self.settings.redact(f"{type(e).__name__}: {e}")) != self._warned:
                log.warning("%s: %s", failed, reason)
            self._warned = reason
            return None

    def close(self) -> None:
        """Close the client's connections."""
        if self.client is not None:
            self.client.close()

    def _say(self) -> None:
        if self.refusal is not None:
            log.info("committed offsets: one OffsetFetch a group, as %s", self.refusal)
            self.refusal = None


class GroupOffsetsClient:
    """A kafka-python network client reused across fetches, rebuilt after a failure; knows each group's coordinator."""

    def __init__(self, conf: dict[str, Any]):
        self.conf = conf
        self._client: Any = None
        self._coordinators: dict[str, int] = {}

    def close(self) -> None:
        """Close the connections; the next fetch opens new ones."""
        client, self._client = self._client, None
        self._coordinators.clear()
        if client is not None:
            client.close()

    def supported(self, deadline: float) -> bool:
        """Whether the brokers answer batched FindCoordinator (v4), OffsetFetch (v8) and ListOffsets v5; connects on
        first use."""
        from kafka.protocol.consumer.group import OffsetFetchRequest
        from kafka.protocol.consumer.offsets import ListOffsetsRequest
        from kafka.protocol.metadata import FindCoordinatorRequest

        client = self._connect(deadline)
        return bool(client.api_version(OffsetFetchRequest, max_version=8) >= 8
                    and client.api_version(FindCoordinatorRequest, max_version=4) >= 4
                    and client.api_version(ListOffsetsRequest, max_version=VERSION) >= VERSION)

    def end_offsets(self, by_leader: dict[int, list[tuple[str, int]]], deadline: float) -> EndOffsets:
        """Log end offsets of these partitions of each leader; kafka-python's errors (a connection, a timeout) raise,
        but a leader not ready within CONNECT_MS (gone, or unknown to this client yet) only loses its partitions."""
        out: EndOffsets = {}
        _exchange(self._connect(deadline), requests(by_leader), deadline, out.update, CONNECT_MS)
        return out

    def topics(self, deadline: float) -> dict[str, Topic]:
        """Every topic's partitions, from any broker; kafka-python's errors raise."""
        client = self._connect(deadline)
        topics: dict[str, Topic] = _receive(client, client.least_loaded_node(), metadata_request(), deadline)
        return topics

    def configs(self, topics: list[str], brokers: list[int], deadline: float) -> Configs:
        """The wanted configs of these topics (of any broker) and brokers (each of itself); kafka-python's errors
        raise, but a broker not ready within CONNECT_MS only loses its own configs."""
        client = self._connect(deadline)
        out: Configs = ({}, {})
        _exchange(client, config_requests(topics, brokers, client.least_loaded_node()), deadline,
                  lambda answer: take_answer(answer, out), CONNECT_MS)
        return out

    def fetch(self, groups: Iterable[str], deadline: float, put: Put, answered: set[str]) -> None:
        """Give `put` the committed offsets of each group that answered and add it to `answered`; a group whose
        coordinator moved is left out; kafka-python's errors (a connection, a timeout) raise."""
        wanted = list(groups)
        client = self._connect(deadline)
        self._find_coordinators(client, [g for g in wanted if g not in self._coordinators], deadline)
        self._offsets(client, [g for g in wanted if g in self._coordinators], deadline, put, answered)

    def _connect(self, deadline: float) -> Any:
        if self._client is None:
            from kafka.net.compat import KafkaNetClient

            logging.getLogger("kafka").setLevel(logging.CRITICAL)  # its reconnect chatter; failures are ours to say
            client = KafkaNetClient(**self.conf)
            try:
                client.check_version(timeout_ms=_left_ms(deadline))
            except Exception:
                client.close()
                raise
            self._client = client
        return self._client

    def _find_coordinators(self, client: Any, groups: list[str], deadline: float) -> None:
        from kafka.protocol.metadata import FindCoordinatorRequest

        for start in range(0, len(groups), FIND_GROUPS):
            request = FindCoordinatorRequest(key_type=0, coordinator_keys=groups[start:start + FIND_GROUPS],
                                             min_version=4, max_version=4)
            answer = _receive(client, client.least_loaded_node(), request, deadline)
            for found in answer.coordinators:
                if found.error_code == 0:
                    self._coordinators[found.key] = found.node_id

    def _offsets(self, client: Any, groups: list[str], deadline: float, put: Put, answered: set[str]) -> None:
        from kafka.protocol.consumer.group import OffsetFetchRequest

        by_node: dict[int, list[str]] = {}
        for g in groups:
            by_node.setdefault(self._coordinators[g], []).append(g)
        entry = OffsetFetchRequest.OffsetFetchRequestGroup
        batches = [(node, node_groups[start:start + BATCH_GROUPS]) for node, node_groups in by_node.items()
                   for start in range(0, len(node_groups), BATCH_GROUPS)]
        outgoing = ((node, fast_offset_fetch(OffsetFetchRequest[8](
            groups=[entry(group_id=g, topics=None) for g in batch], require_stable=False))) for node, batch in batches)
        _exchange(client, outgoing, deadline, lambda answer: self._take(answer, put, answered))

    def _take(self, answer: list[GroupAnswer], put: Put, answered: set[str]) -> None:
        """Hand on each group of one OffsetFetch answer; forget the coordinator of a group it moved away from."""
        for group in answer:
            if group.error_code in COORDINATOR_ERRORS:
                self._coordinators.pop(group.group_id, None)
            if group.error_code == 0:
                put(group.group_id, group.read)
                answered.add(group.group_id)


def _exchange(client: Any, outgoing: Iterable[tuple[int, Any]], deadline: float, take: Callable[[Any], None],
              connect_ms: int | None = None) -> None:
    """Send each (node, request), at most IN_FLIGHT unanswered, and hand each answer to `take` in order. With
    connect_ms, a node not ready within it is skipped with the rest of its requests; without, its error raises."""
    from kafka.errors import KafkaError

    sent: deque[Any] = deque()
    unreachable: set[int] = set()
    for node, request in outgoing:
        if node in unreachable:
            continue
        if len(sent) >= IN_FLIGHT:
            take(_wait(client, sent.popleft(), deadline))
        try:
            client.await_ready(node, timeout_ms=min(_left_ms(deadline), connect_ms or _left_ms(deadline)))
            sent.append(client.send(node, request))
        except KafkaError:
            if connect_ms is None:
                raise
            unreachable.add(node)
    while sent:
        take(_wait(client, sent.popleft(), deadline))


def _left_ms(deadline: float) -> int:
    return max(1, int((deadline - time.monotonic()) * 1000))


def _receive(client: Any, node: int, request: Any, deadline: float) -> Any:
    client.await_ready(node, timeout_ms=_left_ms(deadline))
    return _wait(client, client.send(node, request), deadline)


def _wait(client: Any, future: Any, deadline: float) -> Any:
    from kafka.errors import KafkaTimeoutError

    client.poll(timeout_ms=_left_ms(deadline), future=future)
    if future.failed():
        raise future.exception
    if not future.succeeded():
        raise KafkaTimeoutError("no answer by the fetch's deadline")
    return future.value
